package httpapi_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/bookline/bookline/httpapi"
)

// TestAvailabilityOfCalendars: GET /v1/availability?calendar_ids=a,b lists
// exactly the starts every calendar's own availability lists, with each
// calendar's local time; it takes the same parameters and budget.
func TestAvailabilityOfCalendars(t *testing.T) {
	h := start(t, "", options{partitions: 4})
	h.mustStatus(h.do("PUT", "/v1/calendars/room", map[string]any{"timezone": "UTC",
		"weekly_hours": map[string]any{"mon": []map[string]string{{"start": "09:00", "end": "17:00"}}}}), 201)
	h.createCalendar("doctor", "Europe/Berlin")
	mon := time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
	book := func(cal string, hour int) {
		s := mon.Add(time.Duration(hour) * time.Hour)
		h.mustStatus(h.do("POST", "/v1/calendars/"+cal+"/bookings", bookingBody(s, time.Hour, "x")), 201)
	}
	book("room", 10)
	book("doctor", 12)
	book("doctor", 14)

	q := fmt.Sprintf("from=%s&to=%s&duration=1h&step=30m", mon.Format(time.RFC3339), mon.Add(24*time.Hour).Format(time.RFC3339))
	starts := func(path string) []time.Time {
		r := h.do("GET", path, nil)
		h.mustStatus(r, http.StatusOK)
		var a struct {
			Slots []struct {
				Start time.Time `json:"start"`
			} `json:"slots"`
		}
		r.json(t, &a)
		var out []time.Time
		for _, s := range a.Slots {
			out = append(out, s.Start)
		}
		return out
	}
	room, doctor := starts("/v1/calendars/room/availability?"+q), starts("/v1/calendars/doctor/availability?"+q)
	var want []time.Time
	for _, s := range room {
		if slices.ContainsFunc(doctor, s.Equal) {
			want = append(want, s)
		}
	}
	got := starts("/v1/availability?calendar_ids=room,doctor&" + q)
	if !slices.EqualFunc(got, want, time.Time.Equal) || len(want) == 0 || len(want) >= len(room) {
		t.Fatalf("intersection\n%v\nwant\n%v (room %d starts, doctor %d)", got, want, len(room), len(doctor))
	}
	for _, bad := range []time.Time{mon.Add(10 * time.Hour), mon.Add(12 * time.Hour), mon.Add(13*time.Hour + 30*time.Minute), mon.Add(8 * time.Hour)} {
		if slices.ContainsFunc(got, bad.Equal) {
			t.Errorf("%s is busy on a calendar, and listed", bad)
		}
	}
	r := h.do("GET", "/v1/availability?calendar_ids=room,doctor&"+q, nil)
	var local struct {
		Slots []struct {
			Local map[string]string `json:"local"`
		} `json:"slots"`
	}
	r.json(t, &local)
	if l := local.Slots[0].Local; l["room"] == "" || l["doctor"] == "" || l["room"] == l["doctor"] {
		t.Fatalf("local times %v: want each calendar's, in its zone", l)
	}

	for query, code := range map[string]string{
		"calendar_ids=room&" + q:                  "invalid_request",
		"calendar_ids=room,room&" + q:             "invalid_request",
		"calendar_ids=room,a%20b&" + q:            "invalid_request",
		"calendar_ids=room,ghost&" + q:            "calendar_not_found",
		"calendar_ids=a,b,c,d,e,f,g,h,i,j,k&" + q: "invalid_request",
		"calendar_ids=room,doctor&from=2027-03-01T00:00:00Z&to=2027-03-01T00:00:00Z&duration=1h":          "invalid_request",
		"calendar_ids=room,doctor&from=2027-03-01T00:00:00Z&to=2027-04-01T00:00:00Z&duration=1h&step=10m": "range_too_large",
	} {
		r := h.do("GET", "/v1/availability?"+query, nil)
		if r.Status < 400 || r.errorCode(t) != code {
			t.Errorf("%s: %d %s, want %s", query, r.Status, r.Body, code)
		}
	}
}

// TestAvailabilityOfCalendarsScoped: a key limited to some calendars may
// not ask about others through the intersection.
func TestAvailabilityOfCalendarsScoped(t *testing.T) {
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
	q := "/v1/availability?calendar_ids=alice,bob&from=2027-03-01T00:00:00Z&to=2027-03-02T00:00:00Z&duration=1h"
	if r := h.do("GET", q, nil, "Authorization", "Bearer "+aliceKey); r.Status != http.StatusForbidden {
		t.Fatalf("a key for alice asked about bob: %d %s", r.Status, r.Body)
	}
	h.mustStatus(h.do("GET", q, nil, "Authorization", "Bearer "+adminKey), http.StatusOK)
}
