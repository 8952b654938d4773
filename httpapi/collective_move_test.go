package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/httpapi"
)

// TestCollectiveMoveOverHTTP: the reschedule route of any member moves a
// collective booking on every member or on none, keeping its id: 200
// with that member's part at the new interval (which may overlap the
// old), the old interval free again; a retry with the key gets the same
// answer; a member taken is 409 slot_taken naming that calendar and
// booking, a member's rule 422, and either leaves every part where it
// was; a collective hold does not move.
func TestCollectiveMoveOverHTTP(t *testing.T) {
	h := start(t, "", options{})
	ids := twoPartitions(t, 4, 3)
	for _, id := range ids {
		h.createCalendar(id, "UTC")
	}
	h.mustStatus(h.do("PUT", "/v1/calendars/"+ids[0], map[string]any{"timezone": "UTC", "max_duration_minutes": 120}), http.StatusOK)
	at := time.Date(2027, 5, 3, 10, 0, 0, 0, time.UTC)
	r := h.do("POST", "/v1/bookings", map[string]any{"calendar_ids": ids, "start": at.Format(time.RFC3339),
		"end": at.Add(time.Hour).Format(time.RFC3339), "customer": "Panel"}, "Idempotency-Key", "panel-1")
	h.mustStatus(r, http.StatusCreated)
	var a collectiveAnswer
	r.json(t, &a)
	path := func(cal string) string { return "/v1/calendars/" + cal + "/bookings/" + a.ID + "/reschedule" }
	interval := func(s time.Time, d time.Duration) map[string]any {
		return map[string]any{"start": s.Format(time.RFC3339), "end": s.Add(d).Format(time.RFC3339)}
	}
	// where checks that every member lists its part at [s, s+1h),
	// confirmed, and nothing else of it (no move record left pending).
	where := func(s time.Time) {
		t.Helper()
		for _, cal := range ids {
			found := 0
			for _, b := range h.listAll(cal) {
				switch {
				case b.Status != "confirmed":
					t.Fatalf("%s lists %+v", cal, b)
				case b.ID == a.ID && b.Start.Equal(s) && b.End.Equal(s.Add(time.Hour)):
					found++
				case b.ID == a.ID:
					t.Fatalf("%s lists the collective at %s, want %s", cal, b.Start, s)
				}
			}
			if found != 1 {
				t.Fatalf("%s does not list the collective", cal)
			}
		}
	}

	// Half an hour later, through the second member: overlaps itself.
	mv := h.do("POST", path(ids[1]), interval(at.Add(30*time.Minute), time.Hour), "Idempotency-Key", "mv-1")
	h.mustStatus(mv, http.StatusOK)
	var moved collectiveAnswer
	mv.json(t, &moved)
	if moved.ID != a.ID || moved.CalendarID != ids[1] || moved.Status != "confirmed" || !moved.Start.Equal(at.Add(30*time.Minute)) ||
		strings.Join(moved.CalendarIDs, ",") != strings.Join(ids, ",") {
		t.Fatalf("move: %s", mv.Body)
	}
	again := h.do("POST", path(ids[1]), interval(at.Add(30*time.Minute), time.Hour), "Idempotency-Key", "mv-1")
	if again.Status != http.StatusOK || string(again.Body) != string(mv.Body) {
		t.Fatalf("retry: %d %s, first %s", again.Status, again.Body, mv.Body)
	}
	where(at.Add(30 * time.Minute))
	// The key again with another interval: not this request's answer.
	if r := h.do("POST", path(ids[1]), interval(at.Add(90*time.Minute), time.Hour), "Idempotency-Key", "mv-1"); r.Status != http.StatusUnprocessableEntity ||
		r.errorCode(t) != actor.CodeIdempotencyKeyReused {
		t.Fatalf("the key with another body: %d %s", r.Status, r.Body)
	}
	where(at.Add(30 * time.Minute))
	// The old interval's first half is free again.
	early := h.do("POST", "/v1/calendars/"+ids[0]+"/bookings", bookingBody(at, 30*time.Minute, "Early"))
	h.mustStatus(early, http.StatusCreated)
	var e booking
	early.json(t, &e)
	h.mustStatus(h.do("DELETE", "/v1/calendars/"+ids[0]+"/bookings/"+e.ID, nil), http.StatusOK)

	// ids[2] is taken later on: nothing moves.
	later := at.Add(4 * time.Hour)
	blocker := h.do("POST", "/v1/calendars/"+ids[2]+"/bookings", bookingBody(later, time.Hour, "Solo"))
	h.mustStatus(blocker, http.StatusCreated)
	var solo booking
	blocker.json(t, &solo)
	for range 2 { // the retry gets the same refusal
		no := h.do("POST", path(ids[0]), interval(later.Add(-30*time.Minute), time.Hour), "Idempotency-Key", "mv-2")
		h.mustStatus(no, http.StatusConflict)
		var refused collectiveAnswer
		no.json(t, &refused)
		if refused.Error == nil || refused.Error.Code != actor.CodeSlotTaken || refused.Error.Conflict == nil ||
			refused.Error.Conflict.CalendarID != ids[2] || refused.Error.Conflict.BookingID != solo.ID {
			t.Fatalf("conflict: %s", no.Body)
		}
	}
	where(at.Add(30 * time.Minute))
	// The members that voted yes hold nothing there any more.
	next := h.do("POST", "/v1/calendars/"+ids[1]+"/bookings", bookingBody(later.Add(-30*time.Minute), time.Hour, "Next"))
	h.mustStatus(next, http.StatusCreated)
	next.json(t, &e)
	h.mustStatus(h.do("DELETE", "/v1/calendars/"+ids[1]+"/bookings/"+e.ID, nil), http.StatusOK)

	// ids[0] allows two hours at most: 422, nothing moves.
	long := h.do("POST", path(ids[2]), interval(at.Add(8*time.Hour), 3*time.Hour))
	if long.Status != http.StatusUnprocessableEntity || long.errorCode(t) != actor.CodeDurationNotAllowed {
		t.Fatalf("a rule: %d %s", long.Status, long.Body)
	}
	where(at.Add(30 * time.Minute))

	// A collective hold does not move; confirmed, it does.
	hr := h.do("POST", "/v1/holds", map[string]any{"calendar_ids": ids[:2], "start": at.Add(10 * time.Hour).Format(time.RFC3339),
		"end": at.Add(11 * time.Hour).Format(time.RFC3339), "customer": "Held", "ttl": "5m"})
	h.mustStatus(hr, http.StatusCreated)
	var held collectiveAnswer
	hr.json(t, &held)
	heldPath := "/v1/calendars/" + ids[0] + "/bookings/" + held.ID + "/reschedule"
	if r := h.do("POST", heldPath, interval(at.Add(12*time.Hour), time.Hour)); r.Status != http.StatusConflict || r.errorCode(t) != actor.CodeBookingNotConfirmed {
		t.Fatalf("move of a collective hold: %d %s", r.Status, r.Body)
	}
	h.mustStatus(h.do("POST", "/v1/calendars/"+ids[0]+"/holds/"+held.ID+"/confirm", nil), http.StatusOK)
	h.mustStatus(h.do("POST", heldPath, interval(at.Add(12*time.Hour), time.Hour)), http.StatusOK)
}

// TestCollectiveMoveScoped: a key limited to some calendars moves a
// collective only when it may use every member.
func TestCollectiveMoveScoped(t *testing.T) {
	kr, err := httpapi.NewKeyring([]httpapi.KeySpec{
		{Name: "ops", Role: httpapi.RoleAdmin, SHA256: httpapi.HashKey(adminKey)},
		{Name: "alice-only", Role: httpapi.RoleBooker, SHA256: httpapi.HashKey(aliceKey), Calendars: []string{"alice"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, "", options{api: func(c *httpapi.Config) { c.Keys = kr }})
	for _, id := range []string{"alice", "bob"} {
		h.mustStatus(h.do("PUT", "/v1/calendars/"+id, map[string]string{"timezone": "UTC"}, "Authorization", "Bearer "+adminKey), 201)
	}
	body := map[string]any{"calendar_ids": []string{"alice", "bob"}, "start": "2027-05-03T10:00:00Z", "end": "2027-05-03T11:00:00Z", "customer": "P"}
	r := h.do("POST", "/v1/bookings", body, "Authorization", "Bearer "+adminKey)
	h.mustStatus(r, http.StatusCreated)
	var a collectiveAnswer
	r.json(t, &a)
	to := map[string]string{"start": "2027-05-03T12:00:00Z", "end": "2027-05-03T13:00:00Z"}
	if m := h.do("POST", "/v1/calendars/alice/bookings/"+a.ID+"/reschedule", to, "Authorization", "Bearer "+aliceKey); m.Status != http.StatusForbidden {
		t.Fatalf("a key for alice moved bob's part: %d %s", m.Status, m.Body)
	}
	for _, cal := range []string{"alice", "bob"} {
		if got := h.listAllWith(cal, "Authorization", "Bearer "+adminKey); len(got) != 1 || got[0].Start.Hour() != 10 {
			t.Fatalf("%s has %+v", cal, got)
		}
	}
	h.mustStatus(h.do("POST", "/v1/calendars/bob/bookings/"+a.ID+"/reschedule", to, "Authorization", "Bearer "+adminKey), http.StatusOK)
}
