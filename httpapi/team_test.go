package httpapi_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/bookline/bookline/httpapi"
)

// teamCals are the calendars booked together on the collective booking
// page's tests: poolKeyring(t, teamCals) gives poolPageKey listing both
// and partPageKey listing only the first.
var teamCals = []string{"ada", "room3"}

func teamPageHarness(t *testing.T) *harness {
	return start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = poolKeyring(t, teamCals)
		c.PageRateLimit, c.PageRateBurst = 1000, 1000 // every tab is 127.0.0.1
	}})
}

// TestTeamPageProfile: GET /v1/page?calendar_ids= folds the calendars'
// page profiles so that what it offers every calendar takes: the
// durations all accept (room3 accepts a range, of which its profile
// offers only 45 minutes, and so also ada's 60), the coarsest grid, the
// nearest horizon, the shortest hold; each calendar named with its grid.
// A publishable key must list every calendar.
func TestTeamPageProfile(t *testing.T) {
	h := teamPageHarness(t)
	h.putCalendar("ada", map[string]any{"name": "Dr Ada", "timezone": "Europe/Berlin", "slot_step_minutes": 30,
		"allowed_durations_minutes": []int{30, 60}, "horizon_days": 30, "max_hold_ttl_seconds": 600})
	h.putCalendar("room3", map[string]any{"name": "Room 3", "timezone": "UTC",
		"min_duration_minutes": 45, "max_duration_minutes": 90, "max_hold_ttl_seconds": 300})
	r := h.do("GET", "/v1/page?calendar_ids=ada,room3", nil, bearer(poolPageKey)...)
	h.mustStatus(r, http.StatusOK)
	var got struct {
		CalendarIDs []string `json:"calendar_ids"`
		Calendars   []struct {
			CalendarID  string `json:"calendar_id"`
			Name        string `json:"name"`
			StepMinutes int    `json:"step_minutes"`
		} `json:"calendars"`
		Timezone          string `json:"timezone"`
		DurationsMinutes  []int  `json:"durations_minutes"`
		StepMinutes       int    `json:"step_minutes"`
		HorizonDays       int    `json:"horizon_days"`
		MaxHoldTTLSeconds int    `json:"max_hold_ttl_seconds"`
	}
	r.json(t, &got)
	if !slices.Equal(got.CalendarIDs, teamCals) || len(got.Calendars) != 2 || got.Calendars[0].Name != "Dr Ada" || got.Calendars[1].Name != "Room 3" ||
		got.Calendars[0].StepMinutes != 30 || got.Calendars[1].StepMinutes != 15 || got.Timezone != "Europe/Berlin" ||
		!slices.Equal(got.DurationsMinutes, []int{60}) || got.StepMinutes != 30 || got.HorizonDays != 30 || got.MaxHoldTTLSeconds != 300 {
		t.Fatalf("profile %s", r.Body)
	}
	if r := h.do("GET", "/v1/page?calendar_ids=ada,room3", nil, bearer(partPageKey)...); r.Status != http.StatusForbidden {
		t.Errorf("a key missing room3: %d %s", r.Status, r.Body)
	}
	if r := h.do("GET", "/v1/page?calendar_ids=ada,nope", nil, bearer(adminKey)...); r.Status != http.StatusNotFound || r.errorCode(t) != "calendar_not_found" {
		t.Errorf("a calendar that does not exist: %d %s", r.Status, r.Body)
	}
	if r := h.do("GET", "/v1/page?calendar_ids=ada", nil, bearer(adminKey)...); r.Status != http.StatusBadRequest {
		t.Errorf("one calendar: %d %s", r.Status, r.Body)
	}
}
