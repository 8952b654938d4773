package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// logged is how many commands the stream holds.
func (h *harness) logged() uint64 {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := h.node.JetStream().Stream(ctx, queue.StreamName)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.Msgs
}

// A booking or hold without an Idempotency-Key that the committed index
// refuses is answered from the index, with the body the writer gives, and is
// not logged; with a key it goes through the log and its answer is recorded.
func TestRefusedFromIndex(t *testing.T) {
	h := start(t, "", options{partitions: 2})
	h.createCalendar("cal", "UTC")
	first := h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "ann"))
	h.mustStatus(first, 201)
	var ann booking
	first.json(t, &ann)
	before := h.logged()
	// A refusal is answered from the index only once the newest commit
	// is visible (its log synced): on a loaded machine a later commit,
	// such as the event publisher's, may still wait for its sync.
	waitVisible := func() {
		t.Helper()
		queuetest.CheckFor(t, 10*time.Second, func() error {
			if ok, err := h.node.Store().ViewIfVisible(func(*data.Tx) error { return nil }); err != nil || !ok {
				return fmt.Errorf("index not visible yet (%v)", err)
			}
			return nil
		})
	}
	waitVisible()

	overlap := bookingBody(base.Add(30*time.Minute), time.Hour, "bob")
	keyless := h.do("POST", "/v1/calendars/cal/bookings", overlap)
	h.mustStatus(keyless, 409)
	keyed := h.do("POST", "/v1/calendars/cal/bookings", overlap, "Idempotency-Key", "bob-1")
	h.mustStatus(keyed, 409)
	if !bytes.Equal(keyless.Body, keyed.Body) || keyless.errorCode(t) != "slot_taken" {
		t.Fatalf("from the index: %s\nfrom the writer: %s", keyless.Body, keyed.Body)
	}
	waitVisible()
	ghost := h.do("POST", "/v1/calendars/ghost/bookings", overlap)
	if ghost.Status != 404 || ghost.errorCode(t) != "calendar_not_found" {
		t.Fatalf("ghost: %d %s", ghost.Status, ghost.Body)
	}
	// Holds too.
	hold := bookingBody(base.Add(30*time.Minute), time.Hour, "cy")
	hold["ttl"] = "2m"
	waitVisible()
	keylessHold := h.do("POST", "/v1/calendars/cal/holds", hold)
	keyedHold := h.do("POST", "/v1/calendars/cal/holds", hold, "Idempotency-Key", "cy-1")
	if keylessHold.Status != 409 || !bytes.Equal(keylessHold.Body, keyedHold.Body) {
		t.Fatalf("hold from the index: %d %s\nfrom the writer: %d %s", keylessHold.Status, keylessHold.Body, keyedHold.Status, keyedHold.Body)
	}
	hold["ttl"] = "2h" // over the default maximum of an hour: the writer's 400
	waitVisible()
	longHold := h.do("POST", "/v1/calendars/cal/holds", hold)
	if longHold.Status != 400 || longHold.errorCode(t) != "invalid_request" || !strings.Contains(string(longHold.Body), `"field":"ttl"`) {
		t.Fatalf("long hold: %d %s", longHold.Status, longHold.Body)
	}
	if got := h.logged(); got != before+2 {
		t.Fatalf("%d commands logged, want 2 (the keyed ones)", got-before)
	}

	// The slot is freed: a keyless booking is accepted (by the writer),
	// while the keyed one keeps its recorded answer.
	h.mustStatus(h.do("DELETE", "/v1/calendars/cal/bookings/"+ann.ID, nil), 200)
	if r := h.do("POST", "/v1/calendars/cal/bookings", overlap, "Idempotency-Key", "bob-1"); r.Status != 409 || !bytes.Equal(r.Body, keyed.Body) {
		t.Fatalf("keyed retry after the cancel: %d %s", r.Status, r.Body)
	}
	h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", overlap), 201)

	text := string(h.do("GET", "/metrics", nil).Body)
	for _, c := range []struct {
		typ, reason string
		want        float64
	}{{"booking.create", "slot_taken", 1}, {"booking.create", "calendar_not_found", 1}, {"hold.create", "slot_taken", 1}, {"hold.create", "invalid_request", 1}} {
		if got, _ := metricValue(text, "bookline_refused_from_index_total", map[string]string{"type": c.typ, "reason": c.reason}); got != c.want {
			t.Errorf("refused from the index, %s %s: %v, want %v", c.typ, c.reason, got, c.want)
		}
	}
}

// With LogEveryBooking (serve --log-every-booking) every booking is logged.
func TestLogEveryBooking(t *testing.T) {
	h := start(t, "", options{partitions: 2, api: func(c *httpapi.Config) { c.LogEveryBooking = true }})
	h.createCalendar("cal", "UTC")
	h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "ann")), 201)
	before := h.logged()
	h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "bob")), 409)
	h.mustStatus(h.do("POST", "/v1/calendars/ghost/bookings", bookingBody(base, time.Hour, "bob")), 404)
	if got := h.logged(); got != before+2 {
		t.Fatalf("%d commands logged, want 2", got-before)
	}
}
