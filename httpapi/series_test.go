package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/httpapi"
)

type seriesAnswer struct {
	ID          string             `json:"id"`
	SeriesID    string             `json:"series_id"`
	Status      string             `json:"status"`
	Start       time.Time          `json:"start"`
	Occurrences []actor.Occurrence `json:"occurrences"`
	Error       *struct {
		Code        string             `json:"code"`
		Message     string             `json:"message"`
		Occurrences []actor.Occurrence `json:"occurrences"`
		Details     []actor.FieldError `json:"details"`
	} `json:"error"`
}

// TestSeriesOverHTTP: a booking with a recurrence books every occurrence
// (201, the first with the occurrences), each listed with its series id;
// a conflict refuses the series (409, its occurrence named) and books
// nothing; on_conflict skip books the free ones; a cancel with scope
// following cancels from an occurrence on; a retry with the key gets the
// same answer.
func TestSeriesOverHTTP(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("team", "Europe/Berlin")
	berlin, _ := time.LoadLocation("Europe/Berlin")
	mon := time.Date(2027, 3, 22, 10, 0, 0, 0, berlin) // DST starts on Sunday the 28th
	body := map[string]any{"start": mon.Format(time.RFC3339), "end": mon.Add(time.Hour).Format(time.RFC3339), "customer": "Sam",
		"recurrence": map[string]any{"freq": "weekly", "count": 4}}
	r := h.do("POST", "/v1/calendars/team/bookings", body, "Idempotency-Key", "weekly-1")
	h.mustStatus(r, http.StatusCreated)
	var a seriesAnswer
	r.json(t, &a)
	if a.SeriesID == "" || a.Status != "confirmed" || len(a.Occurrences) != 4 || a.ID != a.Occurrences[0].BookingID {
		t.Fatalf("series: %s", r.Body)
	}
	for i, o := range a.Occurrences {
		if want := mon.AddDate(0, 0, 7*i); !o.Start.Equal(want) {
			t.Errorf("occurrence %d at %s, want %s (10:00 in Berlin)", i, o.Start, want)
		}
	}
	again := h.do("POST", "/v1/calendars/team/bookings", body, "Idempotency-Key", "weekly-1")
	if again.Status != http.StatusCreated || string(again.Body) != string(r.Body) {
		t.Fatalf("retry: %d %s", again.Status, again.Body)
	}
	list := h.do("GET", "/v1/calendars/team/bookings?from=2027-03-01T00:00:00Z&to=2027-05-01T00:00:00Z", nil)
	if n := strings.Count(string(list.Body), `"series_id":"`+a.SeriesID+`"`); n != 4 {
		t.Fatalf("%d listed bookings carry the series id: %s", n, list.Body)
	}

	// A series that meets one of those occurrences: refused, nothing booked.
	clash := map[string]any{"start": mon.AddDate(0, 0, -7).Format(time.RFC3339), "end": mon.AddDate(0, 0, -7).Add(time.Hour).Format(time.RFC3339),
		"customer": "Kim", "recurrence": map[string]any{"freq": "weekly", "count": 3}}
	r = h.do("POST", "/v1/calendars/team/bookings", clash)
	var e seriesAnswer
	r.json(t, &e)
	if r.Status != http.StatusConflict || e.Error == nil || e.Error.Code != "slot_taken" || len(e.Error.Occurrences) != 1 ||
		e.Error.Occurrences[0].Index != 1 || e.Error.Occurrences[0].Status != actor.OccurrenceRefused {
		t.Fatalf("clash: %d %s", r.Status, r.Body)
	}
	list2 := h.do("GET", "/v1/calendars/team/bookings?from=2027-03-01T00:00:00Z&to=2027-05-01T00:00:00Z", nil)
	if string(list2.Body) != string(list.Body) {
		t.Fatalf("a refused series changed the bookings:\n%s\n%s", list2.Body, list.Body)
	}
	clash["on_conflict"] = "skip"
	r = h.do("POST", "/v1/calendars/team/bookings", clash)
	h.mustStatus(r, http.StatusCreated)
	r.json(t, &e)
	if len(e.Occurrences) != 3 || e.Occurrences[0].Status != "confirmed" || e.Occurrences[1].Status != actor.OccurrenceSkipped ||
		e.Occurrences[2].Status != actor.OccurrenceSkipped || e.Occurrences[1].Code != "slot_taken" {
		t.Fatalf("skip: %s", r.Body)
	}

	// Cancel this and the following occurrences.
	r = h.do("DELETE", "/v1/calendars/team/bookings/"+a.Occurrences[2].BookingID+"?scope=following", nil)
	h.mustStatus(r, http.StatusOK)
	r.json(t, &e)
	if e.Status != "cancelled" || len(e.Occurrences) != 2 || e.Occurrences[1].Status != "cancelled" {
		t.Fatalf("cancel following: %s", r.Body)
	}
	r = h.do("DELETE", "/v1/calendars/team/bookings/"+a.Occurrences[0].BookingID+"?scope=all", nil)
	if r.Status != http.StatusBadRequest || r.errorCode(t) != "invalid_request" {
		t.Fatalf("unknown scope: %d %s", r.Status, r.Body)
	}
}

// TestWriteBodiesRefuseUnknownMembers: a member a write does not define is
// refused with the member named, never dropped, as are malformed
// recurrences.
func TestWriteBodiesRefuseUnknownMembers(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("c", "UTC")
	at := time.Date(2027, 5, 3, 10, 0, 0, 0, time.UTC)
	base := func(extra map[string]any) map[string]any {
		b := map[string]any{"start": at.Format(time.RFC3339), "end": at.Add(time.Hour).Format(time.RFC3339), "customer": "Ann"}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	for _, tc := range []struct {
		path  string
		body  any
		field string
	}{
		{"/v1/calendars/c/bookings", base(map[string]any{"calendar_ids": []string{"a", "b"}}), "calendar_ids"},
		{"/v1/calendars/c/bookings", base(map[string]any{"recurence": map[string]any{"freq": "daily", "count": 2}}), "recurence"},
		{"/v1/calendars/c/bookings", base(map[string]any{"recurrence": map[string]any{"freq": "hourly", "count": 2}}), "recurrence.freq"},
		{"/v1/calendars/c/bookings", base(map[string]any{"recurrence": "daily"}), "recurrence"},
		{"/v1/calendars/c/bookings", base(map[string]any{"on_conflict": "skip"}), "on_conflict"},
		{"/v1/calendars/c/holds", base(map[string]any{"seats": 2}), "seats"},
	} {
		r := h.do("POST", tc.path, tc.body)
		var a seriesAnswer
		r.json(t, &a)
		if r.Status != http.StatusBadRequest || a.Error == nil || a.Error.Code != "invalid_request" || len(a.Error.Details) == 0 || a.Error.Details[0].Field != tc.field {
			t.Errorf("%s %v: %d %s, want 400 naming %s", tc.path, tc.body, r.Status, r.Body, tc.field)
		}
	}
	r := h.do("PUT", "/v1/calendars/c", map[string]any{"timezone": "UTC", "bufer_after_minutes": 15})
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "bufer_after_minutes") {
		t.Errorf("calendar with a misspelt rule: %d %s", r.Status, r.Body)
	}
	r = h.do("POST", "/v1/calendars/c/bookings", base(nil))
	h.mustStatus(r, http.StatusCreated)
	var b seriesAnswer
	r.json(t, &b)
	r = h.do("POST", "/v1/calendars/c/bookings/"+b.ID+"/reschedule", map[string]any{"start": at.Add(2 * time.Hour).Format(time.RFC3339),
		"end": at.Add(3 * time.Hour).Format(time.RFC3339), "notify": true})
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), `"notify"`) {
		t.Errorf("reschedule with an unknown member: %d %s", r.Status, r.Body)
	}
}

// TestHeldSeriesOverHTTP: a hold with a recurrence holds every occurrence;
// confirming the hold answered confirms them all.
func TestHeldSeriesOverHTTP(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("c", "UTC")
	at := time.Date(2027, 6, 7, 9, 0, 0, 0, time.UTC)
	r := h.do("POST", "/v1/calendars/c/holds", map[string]any{"start": at.Format(time.RFC3339), "end": at.Add(time.Hour).Format(time.RFC3339),
		"customer": "Hal", "ttl": "10m", "recurrence": map[string]any{"freq": "weekly", "count": 3}})
	h.mustStatus(r, http.StatusCreated)
	var held struct {
		seriesAnswer
		HoldSecret string `json:"hold_secret"`
	}
	r.json(t, &held)
	if held.Status != "held" || held.HoldSecret == "" || len(held.Occurrences) != 3 {
		t.Fatalf("held series: %s", r.Body)
	}
	r = h.do("POST", "/v1/calendars/c/holds/"+held.ID+"/confirm", nil)
	h.mustStatus(r, http.StatusOK)
	var a seriesAnswer
	r.json(t, &a)
	if a.Status != "confirmed" || len(a.Occurrences) != 3 || a.Occurrences[2].Status != "confirmed" {
		t.Fatalf("confirm: %s", r.Body)
	}
	list := h.do("GET", "/v1/calendars/c/bookings?from=2027-06-01T00:00:00Z&to=2027-07-01T00:00:00Z", nil)
	if n := strings.Count(string(list.Body), `"status":"confirmed"`); n != 3 {
		t.Fatalf("%d confirmed bookings listed: %s", n, list.Body)
	}
}

// TestSeriesCost: a series, of bookings or of holds (which a publishable
// key may ask for), takes a token per 10 occurrences it may make from the
// caller's bucket; without enough, 429 with its cost, and nothing is held.
func TestSeriesCost(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = pageKeyring(t)
		c.PageRateLimit, c.PageRateBurst = 0.01, 40
		c.RateLimit, c.RateBurst = 0.01, 40
	}})
	h.mustStatus(h.do("PUT", "/v1/calendars/clinic", map[string]any{"timezone": "UTC"}, bearer(adminKey)...), http.StatusCreated)
	at := time.Date(2027, 6, 7, 9, 0, 0, 0, time.UTC)
	body := func(count int) map[string]any {
		return map[string]any{"start": at.Format(time.RFC3339), "end": at.Add(time.Hour).Format(time.RFC3339), "customer": "Hal",
			"recurrence": map[string]any{"freq": "daily", "count": count}}
	}
	// 40 occurrences cost 4 of the page address's 40 tokens (one of
	// them taken on arrival).
	h.mustStatus(h.do("POST", "/v1/calendars/clinic/holds", body(40), bearer(pageKey)...), http.StatusCreated)
	// 366 cost 37: more than the 36 left.
	r := h.do("POST", "/v1/calendars/clinic/holds", body(366), bearer(pageKey)...)
	if r.Status != http.StatusTooManyRequests || !strings.Contains(string(r.Body), "costs 37") {
		t.Fatalf("a held series over the budget: %d %s", r.Status, r.Body)
	}
	r = h.do("POST", "/v1/calendars/clinic/bookings", body(366), bearer(bookerKey)...)
	h.mustStatus(r, http.StatusConflict) // its first 40 days are held: the booker's own bucket paid for it
}
