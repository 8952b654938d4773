package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/queue/queuetest"
)

// future is a Monday far enough ahead that notice and horizon rules of the
// tests are about the rules, not about today's date.
func future() time.Time {
	d := time.Now().UTC().AddDate(0, 0, 14).Truncate(24 * time.Hour)
	for d.Weekday() != time.Monday {
		d = d.AddDate(0, 0, 1)
	}
	return d
}

func TestRulesOverHTTP(t *testing.T) {
	h := start(t, "", options{})
	r := h.do("PUT", "/v1/calendars/clinic", map[string]any{
		"timezone":                  "Europe/Berlin",
		"weekly_hours":              map[string]any{"mon": []map[string]string{{"start": "09:00", "end": "17:00"}}},
		"slot_step_minutes":         30,
		"allowed_durations_minutes": []int{30, 60},
		"buffer_after_minutes":      10,
		"min_notice_minutes":        60,
		"horizon_days":              60,
	})
	h.mustStatus(r, 201)
	if !strings.Contains(string(r.Body), `"slot_step_minutes":30`) || !strings.Contains(string(r.Body), `"weekly_hours":{"mon"`) {
		t.Fatalf("calendar with rules: %s", r.Body)
	}
	mon := future()
	berlin, _ := zones.Load("Europe/Berlin")
	at := func(hh, mm int) time.Time {
		return time.Date(mon.Year(), mon.Month(), mon.Day(), hh, mm, 0, 0, berlin)
	}
	h.mustStatus(h.do("POST", "/v1/calendars/clinic/bookings", bookingBody(at(9, 0), time.Hour, "ann")), 201)
	for _, tc := range []struct {
		start  time.Time
		d      time.Duration
		status int
		code   string
	}{
		{at(8, 0), time.Hour, 422, "outside_hours"},
		{at(11, 15), time.Hour, 422, "misaligned"},
		{at(11, 0), 45 * time.Minute, 422, "duration_not_allowed"},
		{at(10, 0), 30 * time.Minute, 422, "buffer_conflict"},
		{at(9, 30), 30 * time.Minute, 409, "slot_taken"},
		{at(9, 0).AddDate(0, 0, 70), 30 * time.Minute, 422, "too_far"},
		{time.Now().Add(10 * time.Minute).Truncate(time.Hour).Add(time.Hour), 30 * time.Minute, 422, ""}, // too soon or outside hours
	} {
		r := h.do("POST", "/v1/calendars/clinic/bookings", bookingBody(tc.start, tc.d, "bob"))
		if r.Status != tc.status || (tc.code != "" && r.errorCode(t) != tc.code) {
			t.Errorf("%s +%s: %d %s, want %d %s", tc.start, tc.d, r.Status, r.Body, tc.status, tc.code)
		}
	}

	// Availability lists exactly what can be booked.
	q := fmt.Sprintf("/v1/calendars/clinic/availability?from=%s&to=%s&duration=30m",
		at(0, 0).UTC().Format(time.RFC3339), at(0, 0).AddDate(0, 0, 1).UTC().Format(time.RFC3339))
	r = h.do("GET", q, nil)
	h.mustStatus(r, 200)
	var av struct {
		Timezone string `json:"timezone"`
		Slots    []struct {
			Start time.Time `json:"start"`
			Local string    `json:"local"`
		} `json:"slots"`
	}
	r.json(t, &av)
	// 09:00-17:00 on a 30-min grid for 30 min: 16 starts; 09:00 and 09:30
	// are booked, 10:00 is in the 10-minute buffer.
	if len(av.Slots) != 13 || av.Timezone != "Europe/Berlin" || !av.Slots[0].Start.Equal(at(10, 30)) {
		t.Fatalf("availability: %s", r.Body)
	}
	for _, s := range av.Slots {
		h.mustStatus(h.do("POST", "/v1/calendars/clinic/bookings", bookingBody(s.Start, 30*time.Minute, "x")), 201)
		break // one is enough here; the property test covers all
	}
	for _, bad := range []string{"duration=30m", "from=x&to=y&duration=30m", q + "x", strings.Replace(q, "30m", "0m", 1)} {
		path := bad
		if !strings.HasPrefix(bad, "/v1") {
			path = "/v1/calendars/clinic/availability?" + bad
		}
		if r := h.do("GET", path, nil); r.Status != 400 {
			t.Errorf("availability %s: %d %s", bad, r.Status, r.Body)
		}
	}
}

func TestCapacityOverHTTP(t *testing.T) {
	h := start(t, "", options{})
	h.mustStatus(h.do("PUT", "/v1/calendars/yoga", map[string]any{"capacity": 5}), 201)
	won := raceSameSlot(h, "yoga", 48)
	if won != 5 {
		t.Fatalf("%d seats taken, capacity 5", won)
	}
	if got := h.listAll("yoga"); len(got) != 5 {
		t.Fatalf("%d listed", len(got))
	}
}

func TestHoldsAndRescheduleOverHTTP(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("desk", "UTC")
	slot := future().Add(10 * time.Hour)
	body := bookingBody(slot, time.Hour, "ann")
	body["ttl"] = "2m"
	r := h.do("POST", "/v1/calendars/desk/holds", body)
	h.mustStatus(r, 201)
	var hold booking
	r.json(t, &hold)
	if hold.Status != "held" || !strings.Contains(string(r.Body), `"expires_at"`) {
		t.Fatalf("hold: %s", r.Body)
	}
	if r := h.do("POST", "/v1/calendars/desk/bookings", bookingBody(slot, time.Hour, "bob")); r.Status != 409 {
		t.Fatalf("booking over a hold: %d", r.Status)
	}
	r = h.do("POST", "/v1/calendars/desk/holds/"+hold.ID+"/confirm", nil)
	h.mustStatus(r, 200)
	if !strings.Contains(string(r.Body), `"status":"confirmed"`) {
		t.Fatalf("confirm: %s", r.Body)
	}
	if r := h.do("DELETE", "/v1/calendars/desk/holds/"+hold.ID, nil); r.Status != 409 || r.errorCode(t) != "hold_confirmed" {
		t.Fatalf("release after confirm: %d %s", r.Status, r.Body)
	}
	for _, ttl := range []any{"1h1s", -5, "soon"} {
		b := bookingBody(slot.Add(5*time.Hour), time.Hour, "c")
		b["ttl"] = ttl
		if r := h.do("POST", "/v1/calendars/desk/holds", b); r.Status != 400 {
			t.Errorf("ttl %v: %d %s", ttl, r.Status, r.Body)
		}
	}
	if r := h.do("POST", "/v1/calendars/desk/holds/00000000000000000000000000/confirm", nil); r.Status != 404 || r.errorCode(t) != "hold_not_found" {
		t.Fatalf("unknown hold: %d %s", r.Status, r.Body)
	}

	// Reschedule: refused keeps the old interval, accepted moves it.
	other := h.do("POST", "/v1/calendars/desk/bookings", bookingBody(slot.Add(2*time.Hour), time.Hour, "bob"))
	h.mustStatus(other, 201)
	mv := func(start time.Time) response {
		return h.do("POST", "/v1/calendars/desk/bookings/"+hold.ID+"/reschedule", map[string]string{
			"start": start.Format(time.RFC3339), "end": start.Add(time.Hour).Format(time.RFC3339)})
	}
	if r := mv(slot.Add(90 * time.Minute)); r.Status != 409 {
		t.Fatalf("reschedule onto bob: %d %s", r.Status, r.Body)
	}
	if r := h.do("POST", "/v1/calendars/desk/bookings", bookingBody(slot, time.Hour, "eve")); r.Status != 409 {
		t.Fatalf("old interval freed by a refused reschedule: %d", r.Status)
	}
	r = mv(slot.Add(4 * time.Hour))
	h.mustStatus(r, 200)
	h.mustStatus(h.do("POST", "/v1/calendars/desk/bookings", bookingBody(slot, time.Hour, "eve")), 201)
	if got := h.listAll("desk"); len(got) != 3 {
		t.Fatalf("after reschedule: %d bookings", len(got))
	}
}

// TestHoldExpiresWithoutTraffic: a hold's interval is released in the log by
// the node's expirer even when no other command arrives.
func TestHoldExpiresWithoutTraffic(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("kiosk", "UTC")
	body := bookingBody(future(), time.Hour, "ann")
	body["ttl"] = 1
	r := h.do("POST", "/v1/calendars/kiosk/holds", body)
	h.mustStatus(r, 201)
	var hold booking
	r.json(t, &hold)
	queuetest.CheckFor(t, 15*time.Second, func() error {
		r := h.do("GET", "/v1/calendars/kiosk/bookings/"+hold.ID, nil)
		if !strings.Contains(string(r.Body), `"status":"expired"`) {
			return fmt.Errorf("hold not expired yet: %s", r.Body)
		}
		return nil
	})
	if r := h.do("POST", "/v1/calendars/kiosk/holds/"+hold.ID+"/confirm", nil); r.Status != http.StatusConflict || r.errorCode(t) != "hold_expired" {
		t.Fatalf("confirm after expiry: %d %s", r.Status, r.Body)
	}
}
