package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// TestClientIP: X-Forwarded-For is read from the right, over trusted
// proxies only, and only when the peer is one.
func TestClientIP(t *testing.T) {
	proxies, err := ParseTrustedProxies(" 10.0.0.0/8, 192.168.1.1 ,::ffff:172.16.0.0/108, 2001:db8::/32")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(nil, Config{TrustedProxies: proxies})
	open := New(nil, Config{})
	for _, c := range []struct {
		srv  *Server
		peer string
		xff  []string
		want string
	}{
		{open, "10.0.0.1", []string{"203.0.113.1"}, "10.0.0.1"},        // no trusted proxies: ignored
		{srv, "198.51.100.1", []string{"203.0.113.1"}, "198.51.100.1"}, // an untrusted peer: ignored
		{srv, "10.0.0.1", nil, "10.0.0.1"},
		{srv, "10.0.0.1", []string{"203.0.113.1"}, "203.0.113.1"},
		{srv, "10.0.0.1", []string{"1.2.3.4, 203.0.113.1"}, "203.0.113.1"},
		{srv, "10.0.0.1", []string{"1.2.3.4", "203.0.113.1, 192.168.1.1"}, "203.0.113.1"},
		{srv, "::ffff:10.0.0.1", []string{"203.0.113.1,10.2.2.2"}, "203.0.113.1"},
		{srv, "172.16.9.9", []string{"203.0.113.1"}, "203.0.113.1"}, // a mapped prefix is its IPv4 one
		{srv, "2001:db8::5", []string{"2001:db8::7, [2600::1]:443"}, "2600::1"},
		{srv, "10.0.0.1", []string{"203.0.113.1:8080"}, "203.0.113.1"},
		{srv, "10.0.0.1", []string{"10.3.3.3, 10.4.4.4"}, "10.3.3.3"}, // all trusted: the furthest
		{srv, "10.0.0.1", []string{"203.0.113.1, junk, 10.4.4.4"}, "10.4.4.4"},
		{srv, "10.0.0.1", []string{""}, "10.0.0.1"},
		{srv, "10.0.0.1", []string{"::ffff:203.0.113.1"}, "203.0.113.1"},
	} {
		var req fasthttp.Request
		for _, v := range c.xff {
			req.Header.Add("X-Forwarded-For", v)
		}
		var fctx fasthttp.RequestCtx
		fctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(c.peer), Port: 4000}, nil)
		ctx := c.srv.app.AcquireCtx(&fctx)
		got := c.srv.clientIP(ctx)
		c.srv.app.ReleaseCtx(ctx)
		if got != c.want {
			t.Errorf("peer %s, X-Forwarded-For %q: client %s, want %s", c.peer, c.xff, got, c.want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0.1/8/8"} {
		if _, err := ParseTrustedProxies(bad); err == nil || !strings.Contains(err.Error(), "trusted proxy") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if p, err := ParseTrustedProxies(""); err != nil || p != nil {
		t.Errorf("empty: %v %v", p, err)
	}
}

// TestDigestOneAtATime: a digest reads the whole index, so a second one
// while the first runs is refused.
func TestDigestOneAtATime(t *testing.T) {
	srv := New(nil, Config{})
	srv.digesting.Store(true)
	resp, err := srv.app.Test(httptest.NewRequest("GET", "/v1/admin/digest", nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("digest while one runs: %d %v", resp.StatusCode, resp.Header)
	}
}

// storeBackend serves reads from a store and nothing else.
type storeBackend struct{ *data.Store }

func (storeBackend) Submit(context.Context, *actor.Command, string) ([]byte, error) {
	return nil, errors.New("read only")
}
func (storeBackend) Lookup(string, string) ([]byte, bool, error) { return nil, false, nil }
func (storeBackend) Ready() error                                { return nil }

// TestAvailabilitySweepSlots: availability queries beyond
// AvailabilitySweeps at once wait for a slot, and are refused with 503
// when none frees within the reply timeout; a finished query keeps its
// slot for about as long as it took, then frees it.
func TestAvailabilitySweepSlots(t *testing.T) {
	st := datatest.MustOpen(t)
	if err := st.Commit(func(tx *data.Tx) error { return tx.PutCalendar(data.Calendar{ID: "c", Timezone: "UTC"}) }); err != nil {
		t.Fatal(err)
	}
	srv := New(storeBackend{st}, Config{AvailabilitySweeps: 1, ReplyTimeout: 100 * time.Millisecond})
	get := func() *http.Response {
		t.Helper()
		resp, err := srv.app.Test(httptest.NewRequest("GET", "/v1/calendars/c/availability?from=2030-01-01T00:00:00Z&to=2030-01-02T00:00:00Z&duration=30m", nil), 5000)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	srv.sweeps <- struct{}{} // a query in progress
	if resp := get(); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("with the slot taken: %d", resp.StatusCode)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		<-srv.sweeps
	}()
	if resp := get(); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the slot frees: %d", resp.StatusCode)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(srv.sweeps) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the slot was never freed")
		}
		time.Sleep(time.Millisecond)
	}
}
