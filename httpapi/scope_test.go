package httpapi_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestIdempotencyKeysScopedToCaller: two booker keys that send the same
// Idempotency-Key make two independent requests, each answered on its own
// (also after a restart), and neither can read the other's outcome; an
// admin can read both.
func TestIdempotencyKeysScopedToCaller(t *testing.T) {
	dir := t.TempDir()
	opts := options{pendingAfter: 300 * time.Millisecond, api: func(c *httpapi.Config) { c.Keys = testKeyring(t) }}
	h := start(t, dir, opts)
	// Two seats: the same body twice is two bookings if nothing merges them.
	r := h.do("PUT", "/v1/calendars/alice", map[string]any{"timezone": "UTC", "capacity": 2}, bearer(adminKey)...)
	h.mustStatus(r, http.StatusCreated)
	body := bookingBody(base, time.Hour, "ann")

	// Both wait in the log, so each caller learns its request id from a 202.
	h.node.StopWriters()
	type sent struct {
		key, location string
	}
	var reqs []sent
	for _, key := range []string{bookerKey, aliceKey} {
		r := h.doPending("POST", "/v1/calendars/alice/bookings", body, append(bearer(key), "Idempotency-Key", "order-1")...)
		h.mustStatus(r, http.StatusAccepted)
		reqs = append(reqs, sent{key, r.Header.Get("Location")})
	}
	if reqs[0].location == reqs[1].location {
		t.Fatalf("both callers' requests have one Location %s", reqs[0].location)
	}
	// A write without a key is its caller's too.
	r = h.doPending("POST", "/v1/calendars/alice/bookings", bookingBody(base.Add(2*time.Hour), time.Hour, "kim"), bearer(bookerKey)...)
	h.mustStatus(r, http.StatusAccepted)
	keyless := r.Header.Get("Location")
	h.node.StartWriters()
	answers := map[string]response{}
	for _, s := range reqs {
		queuetest.CheckFor(t, 10*time.Second, func() error {
			r := h.do("GET", s.location, nil, bearer(s.key)...)
			if r.Status != http.StatusCreated {
				return fmt.Errorf("GET own outcome: %d %s", r.Status, r.Body)
			}
			answers[s.key] = r
			return nil
		})
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if r := h.do("GET", keyless, nil, bearer(bookerKey)...); r.Status != http.StatusCreated {
			return fmt.Errorf("GET own keyless outcome: %d %s", r.Status, r.Body)
		}
		return nil
	})
	var a, b booking
	answers[bookerKey].json(t, &a)
	answers[aliceKey].json(t, &b)
	if a.ID == b.ID {
		t.Fatalf("two callers with one Idempotency-Key share booking %s", a.ID)
	}
	if got := h.listAllWith("alice", bearer(adminKey)...); len(got) != 3 {
		t.Fatalf("%d bookings, want 3 (two with the key, one without)", len(got))
	}
	// Neither reads the other's outcome; the admin reads both.
	for i, s := range reqs {
		other := reqs[1-i]
		r := h.do("GET", other.location, nil, bearer(s.key)...)
		if r.Status != http.StatusForbidden || r.errorCode(t) != "forbidden" {
			t.Errorf("a booker read another key's outcome: %d %s", r.Status, r.Body)
		}
		if r := h.do("GET", s.location, nil, bearer(adminKey)...); r.Status != http.StatusCreated || !bytes.Equal(r.Body, answers[s.key].Body) {
			t.Errorf("admin reads %s: %d %s", s.location, r.Status, r.Body)
		}
	}
	// The 403 comes from the id alone: the same for a request that does not
	// exist, and for ids no API key made (importers', bookline's own).
	for _, loc := range []string{keyless, keyless + "x", "/v1/calendars/alice/requests/imp.row-1", "/v1/calendars/alice/requests/k.0123456789abcdef0123456789abcdef"} {
		if r := h.do("GET", loc, nil, bearer(aliceKey)...); r.Status != http.StatusForbidden {
			t.Errorf("GET %s by another booker: %d %s", loc, r.Status, r.Body)
		}
	}
	if r := h.do("GET", "/v1/calendars/alice/requests/imp.row-1", nil, bearer(adminKey)...); r.Status != http.StatusNotFound {
		t.Errorf("admin GET of an unknown importer id: %d %s", r.Status, r.Body)
	}
	// Each caller's retry gets its own answer, also after a restart.
	for round := range 2 {
		for _, s := range reqs {
			r := h.do("POST", "/v1/calendars/alice/bookings", body, append(bearer(s.key), "Idempotency-Key", "order-1")...)
			if r.Status != http.StatusCreated || !bytes.Equal(r.Body, answers[s.key].Body) {
				t.Errorf("round %d: retry: %d %s\nwant %s", round, r.Status, r.Body, answers[s.key].Body)
			}
		}
		if round == 0 {
			h.stop()
			h = start(t, dir, opts)
		}
	}
}

// TestLegacyKeyRecordAnswersRetry: a request decided by a version that did
// not scope keys (request id "k." + hex(SHA-256(key))[:32]) still answers
// a retry of the same request after the upgrade, so a retry across it is
// not booked twice. A different request under that key is not answered
// from it: it is another caller's, or another request.
func TestLegacyKeyRecordAnswersRetry(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) { c.Keys = testKeyring(t) }})
	h.mustStatus(h.do("PUT", "/v1/calendars/alice", map[string]any{"timezone": "UTC", "capacity": 2}, bearer(adminKey)...), http.StatusCreated)
	sum := sha256.Sum256([]byte("order-7"))
	legacy := "k." + hex.EncodeToString(sum[:16])
	cmd := fmt.Sprintf(`{"v":1,"type":"booking.create","request_id":%q,"calendar_id":"alice","booking":{"start":%q,"end":%q,"customer":"ann"}}`,
		legacy, base.Format(time.RFC3339), base.Add(time.Hour).Format(time.RFC3339))
	if _, err := h.node.JetStream().Publish(t.Context(), queue.CommandSubject("alice"), []byte(cmd)); err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if got := h.listAllWith("alice", bearer(adminKey)...); len(got) != 1 {
			return fmt.Errorf("%d bookings", len(got))
		}
		return nil
	})
	first := h.listAllWith("alice", bearer(adminKey)...)[0]
	r := h.do("POST", "/v1/calendars/alice/bookings", bookingBody(base, time.Hour, "ann"), append(bearer(bookerKey), "Idempotency-Key", "order-7")...)
	var got booking
	if r.json(t, &got); r.Status != http.StatusCreated || got.ID != first.ID {
		t.Fatalf("retry of a request decided before the upgrade: %d %s, want booking %s", r.Status, r.Body, first.ID)
	}
	r = h.do("POST", "/v1/calendars/alice/bookings", bookingBody(base, 30*time.Minute, "eve"), append(bearer(aliceKey), "Idempotency-Key", "order-7")...)
	if r.json(t, &got); r.Status != http.StatusCreated || got.ID == first.ID {
		t.Fatalf("another request under the legacy key: %d %s", r.Status, r.Body)
	}
	if n := len(h.listAllWith("alice", bearer(adminKey)...)); n != 2 {
		t.Fatalf("%d bookings, want 2", n)
	}
}
