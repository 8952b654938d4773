package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// verifyDoc is the verification example of docs/webhooks.md, kept
// verbatim (TestDocsExampleIsThisOne checks): what a receiver in Go does.
// BEGIN EXAMPLE
func verify(secret string, h http.Header, body []byte) bool {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	ts, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false // stale or missing timestamp: refuse replays
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}

// END EXAMPLE

func TestDocsExampleIsThisOne(t *testing.T) {
	src, err := os.ReadFile("webhook_test.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	example := strings.TrimSpace(s[strings.Index(s, "// BEGIN EXAMPLE\n")+len("// BEGIN EXAMPLE\n") : strings.Index(s, "// END EXAMPLE")])
	doc, err := os.ReadFile("../../docs/webhooks.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), example) {
		t.Fatalf("docs/webhooks.md does not contain the tested example:\n%s", example)
	}
}

func signed(t *testing.T, secrets []string, id string, body []byte) http.Header {
	t.Helper()
	ts := time.Now().Unix()
	sig, err := SignAll(secrets, id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, sig)
	return h
}

func TestSignAndVerify(t *testing.T) {
	oldS, _ := NewSecret()
	newS, _ := NewSecret()
	if !strings.HasPrefix(newS, SecretPrefix) || len(newS) != len(SecretPrefix)+44 {
		t.Fatalf("secret %q", newS)
	}
	body := []byte(`{"type":"booking.confirmed"}`)
	h := signed(t, []string{newS, oldS}, "evt-1-4", body)
	if n := len(strings.Fields(h.Get(HeaderSignature))); n != 2 {
		t.Fatalf("%d signatures during a rotation", n)
	}
	for _, s := range []string{newS, oldS} {
		if err := Verify(s, h, body, time.Now(), DefaultTolerance); err != nil {
			t.Errorf("Verify: %v", err)
		}
		if !verify(s, h, body) {
			t.Error("the documented example refuses a good signature")
		}
	}
	other, _ := NewSecret()
	if err := Verify(other, h, body, time.Now(), DefaultTolerance); !errors.Is(err, ErrSignature) {
		t.Errorf("other secret: %v", err)
	}
	if verify(newS, h, []byte(`{"type":"booking.cancelled"}`)) || verify(other, h, body) {
		t.Error("the documented example accepts a tampered body or a wrong secret")
	}
	if err := Verify(newS, h, body, time.Now().Add(time.Hour), DefaultTolerance); !errors.Is(err, ErrTimestamp) {
		t.Errorf("stale: %v", err)
	}
	// A known vector, computed independently of Sign.
	key := []byte("0123456789abcdef0123456789abcdef")
	sec := SecretPrefix + base64.StdEncoding.EncodeToString(key)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("msg_1.1700000000.{}"))
	got, _ := Sign(sec, "msg_1", 1700000000, []byte("{}"))
	if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); got != want {
		t.Fatalf("Sign %s, want %s", got, want)
	}
}

func TestEventTypes(t *testing.T) {
	for payload, want := range map[string]string{
		`{"type":"calendar.upsert","outcome":"accepted","created":true}`: EventCalendarCreated,
		`{"type":"calendar.upsert","outcome":"accepted"}`:                EventCalendarUpdated,
		`{"type":"booking.create","outcome":"accepted"}`:                 EventBookingConfirmed,
		`{"type":"hold.confirm","outcome":"accepted"}`:                   EventBookingConfirmed,
		`{"type":"booking.cancel","outcome":"accepted"}`:                 EventBookingCancelled,
		`{"type":"booking.reschedule","outcome":"accepted"}`:             EventBookingRescheduled,
		`{"type":"hold.create","outcome":"accepted"}`:                    EventHoldCreated,
		`{"type":"hold.release","outcome":"accepted"}`:                   EventHoldReleased,
		`{"type":"hold.expire","outcome":"accepted"}`:                    EventHoldExpired,
		`{"type":"busy.set","outcome":"accepted"}`:                       EventBusySet,
		`{"type":"busy.clear","outcome":"accepted"}`:                     EventBusyCleared,
		`{"type":"booking.create","outcome":"rejected"}`:                 EventCommandRejected,
		`{"type":"booking.move","outcome":"accepted"}`:                   EventCommandAccepted,
		`{"type":"collective.commit","outcome":"accepted"}`:              EventBookingConfirmed,
		`{"type":"collective.cancel","outcome":"accepted"}`:              EventBookingCancelled,
		`{"type":"collective.prepare","outcome":"accepted"}`:             EventCommandAccepted,
	} {
		if got := EventType([]byte(payload)); got != want {
			t.Errorf("%s: %s, want %s", payload, got, want)
		}
	}
}

func TestGuardURLs(t *testing.T) {
	g, err := NewGuard([]string{"127.0.0.1", "hooks.internal", "10.1.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	for u, ok := range map[string]bool{
		"https://example.com/hook":     true,
		"http://example.com/hook":      false, // not https
		"http://127.0.0.1:8080/h":      true,  // allow-listed
		"https://10.0.0.1/h":           false, // private literal
		"https://10.1.2.3/h":           true,  // allow-listed prefix
		"https://169.254.169.254/":     false, // link-local (cloud metadata)
		"https://[::1]/":               false,
		"https://[::ffff:127.0.0.2]/":  false, // mapped loopback
		"https://100.64.0.1/":          false,
		"ftp://example.com/":           false,
		"https://user:pw@example.com/": false,
		"/relative":                    false,
		"http://hooks.internal/x":      true,
	} {
		if err := g.CheckURL(u); (err == nil) != ok {
			t.Errorf("%s: %v, want ok=%v", u, err, ok)
		}
	}
	if _, err := NewGuard([]string{"http://x/"}); err == nil {
		t.Error("a URL is accepted as an allow-list entry")
	}
}

// TestGuardDialTimeAndRedirects: a name that is not allow-listed and
// resolves to loopback is refused when dialled (what DNS rebinding would
// exploit), redirects are not followed, and the timeout holds.
func TestGuardDialTimeAndRedirects(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data", http.StatusFound)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(30 * time.Second):
			}
		default:
			w.WriteHeader(204)
		}
	}))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	strict, _ := NewGuard(nil)
	_, err := strict.Client(2 * time.Second).Get("http://localhost:" + port + "/")
	if !errors.Is(err, ErrAddress) {
		t.Fatalf("localhost without allow-list: %v, want %v", err, ErrAddress)
	}
	open, _ := NewGuard([]string{"localhost"})
	// A client with room for a slow machine for the redirect; the short
	// timeout only where it must end the request.
	resp, err := open.Client(10 * time.Second).Get("http://localhost:" + port + "/redirect")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("redirect followed: %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://localhost:"+port+"/slow", nil)
	if _, err := open.Client(300 * time.Millisecond).Do(req); err == nil || ctx.Err() != nil {
		t.Fatalf("slow answer: %v (the client's timeout did not end it)", err)
	}
}
