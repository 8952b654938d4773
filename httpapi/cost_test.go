package httpapi_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/httpapi"
)

// availabilityPath is an availability query of calendar cal over
// [from, from+span).
func availabilityPath(cal string, from time.Time, span time.Duration, query string) string {
	return fmt.Sprintf("/v1/calendars/%s/availability?from=%s&to=%s&%s", cal,
		url.QueryEscape(from.Format(time.RFC3339)), url.QueryEscape(from.Add(span).Format(time.RFC3339)), query)
}

// errorMessage is error.message of an error body.
func (r response) errorMessage(t testing.TB) string {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	r.json(t, &e)
	return e.Error.Message
}

// TestAvailabilityBudget: an availability query may span at most 62 days
// and hold at most 6,000 candidate starts ((to - from) / step, rounded up,
// on the calendar's own grid when it has one); beyond either it answers
// 400 with a message that names the limit.
func TestAvailabilityBudget(t *testing.T) {
	h := start(t, "", options{})
	h.mustStatus(h.do("PUT", "/v1/calendars/open", map[string]any{"timezone": "UTC"}), http.StatusCreated)
	h.mustStatus(h.do("PUT", "/v1/calendars/fine", map[string]any{"timezone": "UTC", "slot_step_minutes": 1}), http.StatusCreated)
	from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	for _, c := range []struct {
		name, path string
		status     int
		code, msg  string
	}{
		{"62 days at 15m", availabilityPath("open", from, 62*day, "duration=168h&step=15m"), 200, "", ""},
		{"6000 starts at 1m", availabilityPath("open", from, 6000*time.Minute, "duration=168h&step=1m"), 200, "", ""},
		{"6001 starts at 1m", availabilityPath("open", from, 6001*time.Minute, "duration=30m&step=1m"), 400, "range_too_large", "at most 6000"},
		{"61 days at 1m", availabilityPath("open", from, 61*day, "duration=168h&step=1m"), 400, "range_too_large", "87840 candidate starts on a 1-minute grid"},
		{"62 days at 14m", availabilityPath("open", from, 62*day, "duration=30m&step=14m"), 400, "range_too_large", "at most 6000"},
		{"the calendar's grid", availabilityPath("fine", from, 62*day, "duration=30m&step=24h"), 400, "range_too_large", "the calendar's 1-minute grid"},
		{"63 days", availabilityPath("open", from, 63*day, "duration=30m&step=24h"), 400, "invalid_request", ""},
	} {
		r := h.do("GET", c.path, nil)
		if r.Status != c.status || c.code != "" && r.errorCode(t) != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.Status, r.Body, c.status, c.code)
			continue
		}
		if c.msg != "" && !strings.Contains(r.errorMessage(t), c.msg) {
			t.Errorf("%s: message %q, want one with %q", c.name, r.errorMessage(t), c.msg)
		}
	}
	if r := h.do("GET", availabilityPath("open", from, 63*day, "duration=30m&step=24h"), nil); !strings.Contains(string(r.Body), "at most 62 days") {
		t.Errorf("63 days: %s", r.Body)
	}
}

// TestCostBasedPageLimit: a publishable key's bucket (per client address)
// pays for what a request may cost, not one token a request: a client
// asking for 62 days of availability is refused after the first, one
// asking for a week after five, one asking for a day after the burst of
// 40. The refusal names the cost.
func TestCostBasedPageLimit(t *testing.T) {
	proxies, err := httpapi.ParseTrustedProxies("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = pageKeyring(t)
		c.PageRateLimit, c.PageRateBurst = 0.001, 40
		c.TrustedProxies = proxies // each client below is its own address
	}})
	h.mustStatus(h.do("PUT", "/v1/calendars/clinic", map[string]any{"timezone": "UTC"}, bearer(adminKey)...), http.StatusCreated)
	from := time.Now().UTC().Truncate(24 * time.Hour).Add(48 * time.Hour)
	day := 24 * time.Hour
	served := func(client string, span time.Duration) (n int, last response) {
		for n = 0; n < 100; n++ {
			last = h.do("GET", availabilityPath("clinic", from, span, "duration=30m"), nil,
				append(bearer(pageKey), "X-Forwarded-For", client)...)
			if last.Status != http.StatusOK {
				return n, last
			}
		}
		return n, last
	}
	for _, c := range []struct {
		client string
		span   time.Duration
		want   int
		costs  string
	}{
		{"203.0.113.1", 62 * day, 1, ""},                    // 5952 starts: 60 tokens, at most the burst
		{"203.0.113.2", 7 * day, 5, "this request costs 7"}, // 672 starts
		{"203.0.113.3", day, 40, ""},                        // 96 starts
	} {
		n, last := served(c.client, c.span)
		if n != c.want || last.Status != http.StatusTooManyRequests || last.errorCode(t) != "rate_limited" || last.Header.Get("Retry-After") == "" {
			t.Errorf("%s over %s: %d served, then %d %s; want %d", c.client, c.span, n, last.Status, last.Body, c.want)
		}
		if c.costs != "" && !strings.Contains(last.errorMessage(t), c.costs) {
			t.Errorf("%s: message %q, want %q", c.client, last.errorMessage(t), c.costs)
		}
	}
	// A client that spent one token cannot afford the largest query.
	h.mustStatus(h.do("GET", availabilityPath("clinic", from, day, "duration=30m"), nil, append(bearer(pageKey), "X-Forwarded-For", "203.0.113.5")...), http.StatusOK)
	r := h.do("GET", availabilityPath("clinic", from, 62*day, "duration=30m"), nil, append(bearer(pageKey), "X-Forwarded-For", "203.0.113.5")...)
	if r.Status != http.StatusTooManyRequests || !strings.Contains(r.errorMessage(t), "this request costs 40") {
		t.Fatalf("62 days after a day: %d %s", r.Status, r.Body)
	}
}

// TestCostBasedKeyLimit: an API key's bucket pays a list's page size: a
// page of 1000 costs 10 tokens.
func TestCostBasedKeyLimit(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = pageKeyring(t)
		c.RateLimit, c.RateBurst = 0.001, 25
	}})
	h.mustStatus(h.do("PUT", "/v1/calendars/clinic", map[string]any{"timezone": "UTC"}, bearer(adminKey)...), http.StatusCreated)
	n := 0
	for ; n < 30; n++ {
		if r := h.do("GET", "/v1/calendars/clinic/bookings?limit=1000", nil, bearer(bookerKey)...); r.Status != http.StatusOK {
			if r.Status != http.StatusTooManyRequests || !strings.Contains(r.errorMessage(t), "this request costs 10") {
				t.Fatalf("list %d: %d %s", n, r.Status, r.Body)
			}
			break
		}
	}
	if n != 2 {
		t.Fatalf("%d lists of 1000 served from a burst of 25, want 2", n)
	}
	// The refused list paid its first token; what is left (4) still serves
	// small pages.
	for i := 0; i < 4; i++ {
		h.mustStatus(h.do("GET", "/v1/calendars/clinic/bookings?limit=50", nil, bearer(bookerKey)...), http.StatusOK)
	}
	if r := h.do("GET", "/v1/calendars/clinic/bookings?limit=50", nil, bearer(bookerKey)...); r.Status != http.StatusTooManyRequests {
		t.Fatalf("after the burst: %d %s", r.Status, r.Body)
	}
}

// TestTrustedProxies: the per-client bucket of publishable keys is the
// client's address. X-Forwarded-For counts only from a trusted proxy, and
// then its right-most address that is not a trusted proxy: what a client
// writes into the header itself stands left of it and changes nothing.
func TestTrustedProxies(t *testing.T) {
	page := func(h *harness, xff ...string) response {
		h.t.Helper()
		req, err := http.NewRequest("GET", h.URL+"/v1/calendars/clinic/page", nil)
		if err != nil {
			h.t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+pageKey)
		for _, v := range xff {
			req.Header.Add("X-Forwarded-For", v)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			h.t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}
	boot := func(trusted string) *harness {
		proxies, err := httpapi.ParseTrustedProxies(trusted)
		if err != nil {
			t.Fatal(err)
		}
		h := start(t, "", options{api: func(c *httpapi.Config) {
			c.Keys = pageKeyring(t)
			c.PageRateLimit, c.PageRateBurst = 0.001, 2
			c.TrustedProxies = proxies
		}})
		h.mustStatus(h.do("PUT", "/v1/calendars/clinic", map[string]any{"timezone": "UTC"}, bearer(adminKey)...), http.StatusCreated)
		return h
	}

	t.Run("untrusted peer", func(t *testing.T) {
		h := boot("10.0.0.0/8") // the test's own address, 127.0.0.1, is not a proxy
		h.mustStatus(page(h, "198.51.100.1"), http.StatusOK)
		h.mustStatus(page(h, "198.51.100.2"), http.StatusOK)
		if r := page(h, "198.51.100.3"); r.Status != http.StatusTooManyRequests {
			t.Fatalf("a third spoofed address from the same peer: %d %s", r.Status, r.Body)
		}
		if r := page(h); r.Status != http.StatusTooManyRequests {
			t.Fatalf("the peer itself: %d", r.Status)
		}
	})

	t.Run("trusted proxies", func(t *testing.T) {
		h := boot("127.0.0.1, 10.0.0.0/8")
		// Two clients behind the proxy have a bucket each.
		for _, client := range []string{"203.0.113.7", "203.0.113.8"} {
			h.mustStatus(page(h, client), http.StatusOK)
			h.mustStatus(page(h, client), http.StatusOK)
		}
		if r := page(h, "203.0.113.7"); r.Status != http.StatusTooManyRequests {
			t.Fatalf("203.0.113.7's third: %d", r.Status)
		}
		// 203.0.113.7 puts addresses of its own choosing in front of what
		// the proxy appends: still its own, empty, bucket.
		for _, xff := range [][]string{
			{"192.0.2.1, 203.0.113.7"},
			{"192.0.2.2", "203.0.113.7"},                     // a header line of its own
			{"192.0.2.3, 203.0.113.7, 10.1.2.3"},             // through a second trusted proxy
			{"not-an-address, 203.0.113.7:51234"},            // with a port
			{"192.0.2.4, 203.0.113.7", "10.9.9.9, 10.1.1.1"}, // proxies appending lines
		} {
			if r := page(h, xff...); r.Status != http.StatusTooManyRequests {
				t.Errorf("X-Forwarded-For %q: %d, want 429 (203.0.113.7's bucket)", xff, r.Status)
			}
		}
		// The left-most address is a new one every time: that would be a
		// fresh bucket if it were believed.
		if r := page(h, "192.0.2.99, 203.0.113.8"); r.Status != http.StatusTooManyRequests {
			t.Errorf("203.0.113.8 behind a spoofed address: %d", r.Status)
		}
		// A third client is served.
		h.mustStatus(page(h, "192.0.2.5, 203.0.113.9"), http.StatusOK)
	})
}

// deadLetterStub is a Google sync's dead-letter port; the letters the API
// lists are written straight into the node's index.
type deadLetterStub struct{}

func (deadLetterStub) RetryDeadLetter(string, uint64, uint32) error { return nil }
func (deadLetterStub) DropDeadLetter(string, uint64, uint32) error  { return nil }

// TestDeadLetterPages: the dead letters of a calendar come in pages of at
// most 1000 (limit) with a cursor to the next.
func TestDeadLetterPages(t *testing.T) {
	h := start(t, "", options{})
	err := h.node.Store().Commit(func(tx *data.Tx) error {
		for i := 1; i <= 5; i++ {
			e := data.SyncEntry{Calendar: "g", Seq: uint64(i), Op: data.SyncCreate, ExternalCalendar: "primary",
				Booking: data.Booking{ID: data.BookingID("g", fmt.Sprint(i)), CalendarID: "g", Start: time.Unix(3600, 0).UTC(), End: time.Unix(7200, 0).UTC(), Status: data.StatusConfirmed}}
			if i == 3 {
				e.Sub = 2
			}
			if err := tx.PutDeadLetter(data.DeadLetter{Entry: e, Reason: "forbidden", Attempts: 5, At: time.Unix(99, 0).UTC()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ports := nodePorts(h.node)
	ports.DeadLetters = deadLetterStub{}
	api := httpapi.New(h.node, httpapi.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Ports: ports})
	base, done := serveLoopback(t, api)
	t.Cleanup(func() { _ = api.App().Shutdown(); <-done })
	get := func(q string) response {
		t.Helper()
		r, err := sendRequest(httpClient, base, "GET", "/v1/admin/calendars/g/google/dead-letters"+q, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatalf("no end after %d pages: %v", pages, ids)
		}
		r := get("?limit=2" + cursor)
		h.mustStatus(r, http.StatusOK)
		var page struct {
			DeadLetters []struct {
				ID string `json:"id"`
			} `json:"dead_letters"`
			NextCursor *string `json:"next_cursor"`
		}
		r.json(t, &page)
		for _, d := range page.DeadLetters {
			ids = append(ids, d.ID)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = "&cursor=" + url.QueryEscape(*page.NextCursor)
	}
	if strings.Join(ids, " ") != "1 2 3.2 4 5" {
		t.Fatalf("pages gave %v", ids)
	}
	for _, q := range []string{"?limit=1001", "?limit=0", "?cursor=x"} {
		if r := get(q); r.Status != http.StatusBadRequest || r.errorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s", q, r.Status, r.Body)
		} else if q == "?limit=1001" && !strings.Contains(string(r.Body), "from 1 to 1000") {
			t.Errorf("%s: %s", q, r.Body)
		}
	}
}

// TestWebhookBudget: there are at most MaxWebhooks endpoints, so their
// list is one bounded page; one more is refused with a message naming the
// limit.
func TestWebhookBudget(t *testing.T) {
	rcv := newReceiver(t)
	h := startHooks(t, "", fastHooks())
	api := httpapi.New(h.node, httpapi.Config{ReplyTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxWebhooks: 2, Ports: hookPorts(h.node, h.hooks)})
	base, done := serveLoopback(t, api)
	t.Cleanup(func() { _ = api.App().Shutdown(); <-done })
	create := func() response {
		t.Helper()
		r, err := sendRequest(httpClient, base, "POST", "/v1/webhooks", map[string]any{"url": rcv.srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	h.mustStatus(create(), http.StatusCreated)
	h.mustStatus(create(), http.StatusCreated)
	if r := create(); r.Status != http.StatusBadRequest || r.errorCode(t) != "invalid_request" || !strings.Contains(r.errorMessage(t), "at most 2 webhook endpoints") {
		t.Fatalf("a third endpoint: %d %s", r.Status, r.Body)
	}
	r, err := sendRequest(httpClient, base, "GET", "/v1/webhooks", nil)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Webhooks []any `json:"webhooks"`
	}
	r.json(t, &list)
	if len(list.Webhooks) != 2 {
		t.Fatalf("list: %s", r.Body)
	}
}
