package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Browser tests of the collective booking page, /book/team/{a,b}: the
// component of the calendar page with calendars="a,b", against the routes
// of several calendars (GET /v1/page and /v1/availability with
// calendar_ids, POST /v1/holds) and the first calendar's hold routes.

// teamURL is the collective page's link for cals (ids separated by
// commas) with key, opening on day when it is not zero.
func (h *harness) teamURL(cals, key string, day time.Time) string {
	u := h.URL + "/book/team/" + cals + "?key=" + url.QueryEscape(key)
	if !day.IsZero() {
		u += "&date=" + day.Format(time.DateOnly)
	}
	return u
}

// commonFreeDays is what the common availability API says: the dates in
// loc with a start of d in [from, to) at which every calendar of cals is
// free, asked in pieces the API accepts.
func (h *harness) commonFreeDays(cals []string, loc *time.Location, from, to time.Time, d time.Duration) map[string]bool {
	h.t.Helper()
	days := map[string]bool{}
	for a := from; a.Before(to); a = a.Add(30 * 24 * time.Hour) {
		b := a.Add(30 * 24 * time.Hour)
		if b.After(to) {
			b = to
		}
		r := h.do("GET", fmt.Sprintf("/v1/availability?calendar_ids=%s&from=%s&to=%s&duration=%s", strings.Join(cals, ","),
			a.UTC().Format(time.RFC3339), b.UTC().Format(time.RFC3339), d), nil, bearer(adminKey)...)
		h.mustStatus(r, http.StatusOK)
		var out struct {
			Slots []struct{ Start time.Time } `json:"slots"`
		}
		r.json(h.t, &out)
		for _, s := range out.Slots {
			days[localDate(s.Start, loc)] = true
		}
	}
	return days
}

// TestTeamPageOpensOnFirstFreeDay: Dr Ada is closed today and tomorrow,
// room 3 the day after: the page opens, without ?date=, on the day after
// that, listing the hours both are free, and names both calendars.
func TestTeamPageOpensOnFirstFreeDay(t *testing.T) {
	h := teamPageHarness(t)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	awayFromEdges(t, berlin, 0) // "today" must not change while the test runs
	now := time.Now().In(berlin)
	y, m, d := now.Date()
	day := func(n int) time.Time { return time.Date(y, m, d+n, 0, 0, 0, 0, berlin) }
	closed := func(days ...int) []map[string]any {
		var out []map[string]any
		for _, n := range days {
			out = append(out, map[string]any{"date": localDate(day(n), berlin), "closed": true})
		}
		return out
	}
	h.putCalendar("ada", map[string]any{"name": "Dr Ada", "timezone": "Europe/Berlin", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": allWeek("09:00", "12:00"), "date_overrides": closed(0, 1)})
	h.putCalendar("room3", map[string]any{"name": "Room 3", "timezone": "Europe/Berlin", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": allWeek("10:00", "13:00"), "date_overrides": closed(2)})

	ctx := newVisitor(t, newBrowser(t), "Europe/Berlin")
	run(t, ctx, "open the page without a date", chromedp.Navigate(h.teamURL("ada,room3", poolPageKey, time.Time{})), settled())
	first := day(3)
	var wantLocals []string
	for hour := 10; hour < 12; hour++ {
		wantLocals = append(wantLocals, time.Date(first.Year(), first.Month(), first.Day(), hour, 0, 0, 0, berlin).Format("2006-01-02T15:04"))
	}
	_, locals := slotsOf(t, ctx)
	v := readMonth(t, ctx)
	if v.Selected != localDate(first, berlin) || !slices.Equal(locals, wantLocals) {
		t.Fatalf("opened on %q listing %v; want %s listing %v\npage text:\n%s", v.Selected, locals, localDate(first, berlin), wantLocals, pageText(ctx))
	}
	if title := textOf(t, ctx, ".bl-title"); title != "Book a time with Dr Ada and Room 3" {
		t.Errorf("title %q", title)
	}
}

// TestTeamPageMonthMarks: Dr Ada works Mondays to Wednesdays and Fridays,
// room 3 Tuesdays to Thursdays, with a nearer horizon, and is fully booked
// on its first Wednesday: the page marks, month by month to the nearest
// horizon, exactly the days the common availability API gives, with one
// availability query a month and no call to a single calendar's routes.
func TestTeamPageMonthMarks(t *testing.T) {
	h := teamPageHarness(t)
	ny, _ := time.LoadLocation("America/New_York")
	awayFromEdges(t, ny, 0, 9)
	now := time.Now().In(ny)
	hours := func(days ...string) map[string]any {
		w := map[string]any{}
		for _, wd := range []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"} {
			w[wd] = []any{}
		}
		for _, wd := range days {
			w[wd] = []map[string]string{{"start": "09:00", "end": "11:00"}}
		}
		return w
	}
	const horizon, roomHorizon = 45, 38
	h.putCalendar("ada", map[string]any{"name": "Dr Ada", "timezone": "America/New_York", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": hours("mon", "tue", "wed", "fri"), "horizon_days": horizon})
	h.putCalendar("room3", map[string]any{"name": "Room 3", "timezone": "America/New_York", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": hours("tue", "wed", "thu"), "horizon_days": roomHorizon})
	booked := now.AddDate(0, 0, 2)
	for booked.Weekday() != time.Wednesday {
		booked = booked.AddDate(0, 0, 1)
	}
	for hour := 9; hour < 11; hour++ {
		start := time.Date(booked.Year(), booked.Month(), booked.Day(), hour, 0, 0, 0, ny)
		h.mustStatus(h.do("POST", "/v1/calendars/room3/bookings", bookingBody(start, time.Hour, "Booked"), bearer(adminKey)...), http.StatusCreated)
	}
	want := h.commonFreeDays(teamCals, ny, now.Truncate(time.Minute), now.AddDate(0, 0, horizon+1), time.Hour)
	weekdays := map[time.Weekday]bool{}
	last := ""
	for d := range want {
		day, _ := time.Parse(time.DateOnly, d)
		weekdays[day.Weekday()] = true
		last = max(last, d)
	}
	if want[localDate(booked, ny)] || len(weekdays) != 2 || !weekdays[time.Tuesday] || !weekdays[time.Wednesday] ||
		last > localDate(now.AddDate(0, 0, roomHorizon), ny) {
		t.Fatalf("the API's common free days %v", want)
	}

	ctx := newVisitor(t, newBrowser(t), "America/New_York")
	recordFetches(t, ctx)
	run(t, ctx, "open the page", chromedp.Navigate(h.teamURL("ada,room3", poolPageKey, time.Time{})), settled())
	for v := readMonth(t, ctx); !v.PrevOff; v = readMonth(t, ctx) {
		run(t, ctx, "previous month", chromedp.Click(chromedp.CSS(".bl-prev")), settled())
	}
	months := 0
	for {
		v := readMonth(t, ctx)
		checkMonth(t, v, want)
		months++
		if v.NextOff {
			if !strings.HasPrefix(localDate(now.AddDate(0, 0, roomHorizon), ny), dateYM(v.Days)) {
				t.Errorf("the last month is %s: the nearest horizon is %d days ahead", v.Title, roomHorizon)
			}
			break
		}
		if months > 3 {
			t.Fatalf("more than 3 months before a %d-day horizon", roomHorizon)
		}
		run(t, ctx, "next month", chromedp.Click(chromedp.CSS(".bl-next")), settled())
	}
	urls := get(t, ctx, "the page's fetches", chromedp.Evaluate[[]string](`window.blFetches`))
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil || strings.HasPrefix(p.Path, "/v1/calendars/") || p.Query().Get("calendar_ids") != "ada,room3" {
			t.Errorf("the page asked %s: want the routes of both calendars", u)
		}
	}
	monthQueries := 0
	for _, q := range availabilityQueries(t, ctx) {
		if q[1].Sub(q[0]) > 25*time.Hour {
			monthQueries++
		}
	}
	if monthQueries != months {
		t.Errorf("%d month queries for %d months", monthQueries, months)
	}
}

// dateYM is the month ("YYYY-MM") of a month view's days.
func dateYM(days []string) string {
	if len(days) == 0 {
		return "?"
	}
	return days[0][:7]
}

// TestTeamPageTwoVisitors: two visitors (two browser contexts) choose the
// same start and hold it at the same moment. One gets it, confirms it and
// is told it is with both calendars; the other is told it was just taken
// and sees the day listed again without it. The booking is then confirmed
// on each calendar, the same booking on both.
//
// A collective hold is prepared on each calendar at once, so two made at
// the same moment can each win one calendar and both be refused (nothing
// is held then; neither visitor is wrong to be told it was taken). The
// race is run again, up to three times, until one visitor wins.
func TestTeamPageTwoVisitors(t *testing.T) {
	h := teamPageHarness(t)
	h.putCalendar("ada", map[string]any{"name": "Dr Ada", "timezone": "UTC", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": allWeek("09:00", "13:00")})
	h.putCalendar("room3", map[string]any{"name": "Room 3", "timezone": "UTC", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": allWeek("08:00", "12:00")})
	day := futureDay()
	target := day.Add(10 * time.Hour)
	browser := newBrowser(t)
	visitors := []context.Context{newVisitor(t, browser, "UTC"), newVisitor(t, browser, "UTC")}
	winner := -1
	for round := 1; winner < 0; round++ {
		if round > 3 {
			t.Fatal("in three races of two visitors for one start, neither got it")
		}
		outcome := raceForStart(t, h, visitors, day, target)
		for i, o := range outcome {
			switch {
			case o == "held" && winner < 0:
				winner = i
			case o == "held":
				t.Fatalf("both visitors hold the start: %q", outcome)
			case !strings.Contains(o, "just taken"):
				t.Fatalf("visitor %d: outcome %q", i, o)
			}
		}
		t.Logf("round %d: %q", round, outcome)
	}
	w := visitors[winner]
	if with := textOf(t, w, ".bl-held-with"); with != "With Dr Ada and Room 3" {
		t.Errorf("the held step says %q", with)
	}
	run(t, w, "the winner confirms", chromedp.Click(chromedp.CSS(".bl-confirm")), chromedp.WaitVisible(chromedp.CSS(".bl-ics")))
	if with := textOf(t, w, ".bl-done-with"); with != "With Dr Ada and Room 3" {
		t.Errorf("the confirmation says %q", with)
	}
	href := get(t, w, "the .ics link", chromedp.Evaluate[string](`document.querySelector('.bl-ics').href`))
	if ics, _ := url.PathUnescape(href); !strings.Contains(ics, "SUMMARY:Booking with Dr Ada and Room 3") {
		t.Errorf("the .ics: %s", ics)
	}
	loser := visitors[1-winner]
	run(t, loser, "the loser's day is listed again without the start", chromedp.Poll[chromedp.Void](fmt.Sprintf(
		`document.querySelectorAll('.bl-slot').length === 2 && !document.querySelector(%q) && !document.querySelector('.bl-pick').hidden`,
		string(slotSel(target))), chromedp.WithPollingTimeout(browserTimeout)))
	var ids []string
	for _, cal := range teamCals {
		var confirmed []booking
		for _, b := range h.listAllWith(cal, bearer(adminKey)...) {
			if b.Status == "confirmed" {
				confirmed = append(confirmed, b)
			}
		}
		if len(confirmed) != 1 || !confirmed[0].Start.Equal(target) || confirmed[0].Customer != fmt.Sprintf("Visitor %d", winner) {
			t.Fatalf("%s: confirmed bookings %+v", cal, confirmed)
		}
		ids = append(ids, confirmed[0].ID)
	}
	if ids[0] != ids[1] {
		t.Errorf("the calendars hold different bookings: %v", ids)
	}
}

// raceForStart has every visitor open the page on day, choose target,
// give a name and press "Hold this time" at the same moment, and answers
// what each was then shown: "held", or the alert's text.
func raceForStart(t *testing.T, h *harness, visitors []context.Context, day, target time.Time) []string {
	t.Helper()
	for i, v := range visitors {
		run(t, v, "visitor chooses the start",
			chromedp.Navigate(h.teamURL("ada,room3", poolPageKey, day)),
			chromedp.WaitVisible(slotSel(target)),
			chromedp.Click(slotSel(target)),
			chromedp.WaitVisible(chromedp.CSS(".bl-name")),
			chromedp.SendKeys(chromedp.CSS(".bl-name"), fmt.Sprintf("Visitor %d", i)),
		)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(visitors))
	for i, v := range visitors {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(v, browserTimeout)
			defer cancel()
			errs[i] = chromedp.Do(ctx, chromedp.Click(chromedp.CSS(".bl-hold")))
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	outcome := make([]string, len(visitors))
	for i, v := range visitors {
		outcome[i] = get(t, v, "wait for the hold's outcome", chromedp.Poll[string](`(() => {
			if (!document.querySelector('.bl-held').hidden) return 'held';
			const a = document.querySelector('.bl-alert');
			return a.hidden ? '' : 'alert: ' + a.innerText;
		})()`, chromedp.WithPollingTimeout(browserTimeout)))
	}
	return outcome
}

// TestTeamPageKey: /book/team/{a,b} is served only with a publishable key
// listing every calendar; otherwise it is 404 like a calendar without a
// page, and a browser shows no booking component.
func TestTeamPageKey(t *testing.T) {
	h := teamPageHarness(t)
	for _, cal := range teamCals {
		h.putCalendar(cal, map[string]any{"name": cal, "timezone": "UTC"})
	}
	page := func(cals, key string) response {
		return h.do("GET", strings.TrimPrefix(h.teamURL(cals, key, time.Time{}), h.URL), nil)
	}
	if r := page("ada,room3", poolPageKey); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `calendars="ada,room3"`) {
		t.Fatalf("the page with a key listing every calendar: %d %s", r.Status, r.Body)
	}
	for _, c := range []struct{ name, cals, key string }{
		{"a key missing a calendar", "ada,room3", partPageKey},
		{"a key missing a calendar, the other order", "room3,ada", partPageKey},
		{"an admin key", "ada,room3", adminKey},
		{"no key", "ada,room3", ""},
	} {
		if r := page(c.cals, c.key); r.Status != http.StatusNotFound || r.errorCode(t) != "not_found" {
			t.Errorf("%s: %d %s", c.name, r.Status, r.Body)
		}
	}
	for _, cals := range []string{"ada", "ada,ada", "ada,room%203"} {
		if r := page(cals, poolPageKey); r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", cals, r.Status, r.Body)
		}
	}
	ctx := newVisitor(t, newBrowser(t), "UTC")
	run(t, ctx, "open the page with a key missing a calendar", chromedp.Navigate(h.teamURL("ada,room3", partPageKey, time.Time{})))
	shown := get(t, ctx, "the page", chromedp.Evaluate[string](`(document.querySelector('bookline-booking') ? 'component ' : '') + document.body.innerText`))
	if strings.HasPrefix(shown, "component") || !strings.Contains(shown, "not_found") {
		t.Fatalf("a browser shows %q", shown)
	}
}
