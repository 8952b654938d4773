package httpapi_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/bookline/bookline/httpapi"
)

// TestFeaturesOffAnswerNotEnabled: an API wired without its optional
// ports serves the bookings as before, and every route of a feature that
// is off answers 404 not_enabled, as docs/openapi.yaml says.
func TestFeaturesOffAnswerNotEnabled(t *testing.T) {
	h := start(t, "", options{})
	bare := httpapi.New(h.node, httpapi.Config{ReplyTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	base, done := serveLoopback(t, bare)
	t.Cleanup(func() { _ = bare.App().Shutdown(); <-done })
	c := newSpecChecker(t, base)

	// The bookings do not need a port: a refusal goes to the log, an
	// outcome is read from the record.
	day := time.Now().UTC().AddDate(0, 0, 3).Truncate(24 * time.Hour)
	at := func(hour int) string { return day.Add(time.Duration(hour) * time.Hour).Format(time.RFC3339) }
	if r := c.do("PUT", "/v1/calendars/off", `{"name":"Off","timezone":"UTC"}`); r.Status != 201 {
		t.Fatalf("create the calendar: %d %s", r.Status, r.Body)
	}
	book := fmt.Sprintf(`{"start":%q,"end":%q,"customer":"Ada"}`, at(9), at(10))
	if r := c.do("POST", "/v1/calendars/off/bookings", book, "Idempotency-Key", "off-1"); r.Status != 201 {
		t.Fatalf("book: %d %s", r.Status, r.Body)
	}
	if r := c.do("POST", "/v1/calendars/off/bookings", book); r.Status != 409 || r.errorCode(t) != "slot_taken" {
		t.Fatalf("book the same slot: %d %s", r.Status, r.Body)
	}
	if r := c.do("GET", "/v1/calendars/off/requests/"+httpapi.KeyRequestID("", "off-1"), ""); r.Status != 201 {
		t.Fatalf("outcome: %d %s", r.Status, r.Body)
	}
	if r := c.do("GET", "/readyz", ""); r.Status != 200 {
		t.Fatalf("readyz: %d %s", r.Status, r.Body)
	}

	const hook = "/v1/webhooks/wh_0123456789abcdef"
	notify := []string{"X-Goog-Channel-ID", "ch", "X-Goog-Channel-Token", "tok", "X-Goog-Resource-State", "exists"}
	for _, q := range []struct {
		method, path, body string
		headers            []string
	}{
		{"GET", "/v1/admin/cluster", "", nil},
		{"GET", "/v1/admin/snapshots", "", nil},
		{"POST", "/v1/admin/snapshots", "", nil},
		{"POST", "/v1/admin/partitions/0/skip", `{"seq":1}`, nil},
		{"POST", "/v1/admin/calendars/off/google/sync", "", nil},
		{"GET", "/v1/admin/calendars/off/google/dead-letters", "", nil},
		{"POST", "/v1/admin/calendars/off/google/dead-letters/1/retry", "", nil},
		{"DELETE", "/v1/admin/calendars/off/google/dead-letters/1", "", nil},
		{"POST", "/v1/google/notifications", "", notify},
		{"POST", "/v1/webhooks", `{"url":"https://example.com/hook"}`, nil},
		{"GET", "/v1/webhooks", "", nil},
		{"GET", hook, "", nil},
		{"PATCH", hook, `{"enabled":false}`, nil},
		{"DELETE", hook, "", nil},
		{"POST", hook + "/rotate-secret", "", nil},
		{"POST", hook + "/replay?from=" + url.QueryEscape(at(0)), "", nil},
	} {
		r := c.do(q.method, q.path, q.body, q.headers...)
		if r.Status != 404 || r.errorCode(t) != httpapi.CodeNotEnabled {
			t.Errorf("%s %s: %d %s, want 404 not_enabled", q.method, q.path, r.Status, r.Body)
		}
	}
}
