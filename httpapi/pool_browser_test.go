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

	"github.com/bookline/bookline/httpapi"
)

// Browser tests of a pool's booking page, /book/pool/{poolId}: the
// component of the calendar page with pool="...", against the pool routes.

// poolCals are the calendars of the pool "front" of poolPageHarness.
var poolCals = []string{"alice", "bob"}

// poolPageHarness is bookline with the keys of poolKeyring for poolCals
// (poolPageKey lists both, partPageKey only alice), and the pool "front"
// of both, made once the calendars are (putPool).
func poolPageHarness(t *testing.T) *harness {
	return start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = poolKeyring(t, poolCals)
		c.PageRateLimit, c.PageRateBurst = 1000, 1000 // every tab is 127.0.0.1
	}})
}

func (h *harness) putPool(id string, cals []string) {
	h.t.Helper()
	h.mustStatus(h.do("PUT", "/v1/pools/"+id, map[string]any{"calendar_ids": cals}, bearer(adminKey)...), http.StatusCreated)
}

// poolURL is the pool page's link with key, opening on day when it is
// not zero.
func (h *harness) poolURL(pool, key string, day time.Time) string {
	u := h.URL + "/book/pool/" + pool + "?key=" + url.QueryEscape(key)
	if !day.IsZero() {
		u += "&date=" + day.Format(time.DateOnly)
	}
	return u
}

// TestPoolPageOpensOnFirstFreeDay: alice is closed today, tomorrow and the
// day after, bob today and tomorrow: the pool's page opens, without
// ?date=, on the day after tomorrow, listing bob's times.
func TestPoolPageOpensOnFirstFreeDay(t *testing.T) {
	h := poolPageHarness(t)
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
	h.putCalendar("alice", map[string]any{"name": "Alice", "timezone": "Europe/Berlin", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": allWeek("09:00", "12:00"), "date_overrides": closed(0, 1, 2)})
	h.putCalendar("bob", map[string]any{"name": "Bob", "timezone": "Europe/Berlin", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": allWeek("13:00", "15:00"), "date_overrides": closed(0, 1)})
	h.putPool("front", poolCals)

	ctx := newVisitor(t, newBrowser(t), "Europe/Berlin")
	run(t, ctx, "open the pool's page without a date", chromedp.Navigate(h.poolURL("front", poolPageKey, time.Time{})), settled())
	first := day(2)
	var wantLocals []string
	for hour := 13; hour < 15; hour++ {
		wantLocals = append(wantLocals, time.Date(first.Year(), first.Month(), first.Day(), hour, 0, 0, 0, berlin).Format("2006-01-02T15:04"))
	}
	_, locals := slotsOf(t, ctx)
	v := readMonth(t, ctx)
	if v.Selected != localDate(first, berlin) || !slices.Equal(locals, wantLocals) {
		t.Fatalf("opened on %q listing %v; want %s listing %v\npage text:\n%s", v.Selected, locals, localDate(first, berlin), wantLocals, pageText(ctx))
	}
}

// TestPoolPageMonthMarks: alice works Mondays, Wednesdays and Fridays,
// bob Tuesdays and Thursdays, and bob's first working day is fully
// booked: the pool's page marks, month by month to the horizon, exactly
// the days on which either has a free start (the union of their
// calendars' availability), with one availability query a month.
func TestPoolPageMonthMarks(t *testing.T) {
	h := poolPageHarness(t)
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
	const horizon = 40
	h.putCalendar("alice", map[string]any{"name": "Alice", "timezone": "America/New_York", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": hours("mon", "wed", "fri"), "horizon_days": horizon})
	h.putCalendar("bob", map[string]any{"name": "Bob", "timezone": "America/New_York", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": hours("tue", "thu"), "horizon_days": horizon})
	h.putPool("front", poolCals)
	booked := now.AddDate(0, 0, 2)
	for booked.Weekday() != time.Tuesday && booked.Weekday() != time.Thursday {
		booked = booked.AddDate(0, 0, 1)
	}
	for hour := 9; hour < 11; hour++ {
		start := time.Date(booked.Year(), booked.Month(), booked.Day(), hour, 0, 0, 0, ny)
		h.mustStatus(h.do("POST", "/v1/calendars/bob/bookings", bookingBody(start, time.Hour, "Booked"), bearer(adminKey)...), http.StatusCreated)
	}
	want := map[string]bool{}
	weekdays := map[time.Weekday]bool{}
	for _, cal := range poolCals {
		for d := range h.freeDays(cal, ny, now.Truncate(time.Minute), now.AddDate(0, 0, horizon+1), time.Hour) {
			want[d] = true
			day, _ := time.Parse(time.DateOnly, d)
			weekdays[day.Weekday()] = true
		}
	}
	if want[localDate(booked, ny)] || len(weekdays) != 5 || weekdays[time.Saturday] || weekdays[time.Sunday] {
		t.Fatalf("the API's free days %v", want)
	}

	ctx := newVisitor(t, newBrowser(t), "America/New_York")
	recordFetches(t, ctx)
	run(t, ctx, "open the pool's page", chromedp.Navigate(h.poolURL("front", poolPageKey, time.Time{})), settled())
	for v := readMonth(t, ctx); !v.PrevOff; v = readMonth(t, ctx) {
		run(t, ctx, "previous month", chromedp.Click(chromedp.CSS(".bl-prev")), settled())
	}
	months := 0
	for {
		v := readMonth(t, ctx)
		checkMonth(t, v, want)
		months++
		if v.NextOff {
			break
		}
		if months > 3 {
			t.Fatalf("more than 3 months before a %d-day horizon", horizon)
		}
		run(t, ctx, "next month", chromedp.Click(chromedp.CSS(".bl-next")), settled())
	}
	var monthQueries int
	urls := get(t, ctx, "the page's fetches", chromedp.Evaluate[[]string](`window.blFetches`))
	for _, u := range urls {
		if strings.Contains(u, "/v1/calendars/") {
			t.Errorf("the pool's page asked a calendar: %s", u)
		}
	}
	for _, q := range availabilityQueries(t, ctx) {
		if q[1].Sub(q[0]) > 25*time.Hour {
			monthQueries++
		}
	}
	if monthQueries != months {
		t.Errorf("%d month queries for %d months", monthQueries, months)
	}
}

// TestPoolPageTwoVisitors: two visitors (two browser contexts) choose the
// same start on the pool's page and hold it at the same moment: both get
// it, on different calendars, confirm it, and each is told which calendar
// took the booking.
func TestPoolPageTwoVisitors(t *testing.T) {
	h := poolPageHarness(t)
	for _, cal := range poolCals {
		h.putCalendar(cal, map[string]any{"name": "Agent " + strings.ToUpper(cal[:1]) + cal[1:], "timezone": "UTC", "slot_step_minutes": 60,
			"allowed_durations_minutes": []int{60}, "weekly_hours": allWeek("09:00", "13:00")})
	}
	h.putPool("front", poolCals)
	day := futureDay()
	target := day.Add(10 * time.Hour)
	browser := newBrowser(t)
	visitors := []context.Context{newVisitor(t, browser, "UTC"), newVisitor(t, browser, "UTC")}
	for i, v := range visitors {
		run(t, v, "visitor chooses the start",
			chromedp.Navigate(h.poolURL("front", poolPageKey, day)),
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
	var heldOn, doneWith []string
	for i, v := range visitors {
		run(t, v, fmt.Sprintf("visitor %d holds", i), chromedp.WaitVisible(chromedp.CSS(".bl-confirm")))
		heldOn = append(heldOn, get(t, v, "the held calendar", chromedp.Evaluate[string](`document.querySelector('.bl-held-with').dataset.calendar`)))
		run(t, v, fmt.Sprintf("visitor %d confirms", i), chromedp.Click(chromedp.CSS(".bl-confirm")), chromedp.WaitVisible(chromedp.CSS(".bl-ics")))
		doneWith = append(doneWith, textOf(t, v, ".bl-done-with"))
	}
	slices.Sort(heldOn)
	slices.Sort(doneWith)
	if !slices.Equal(heldOn, poolCals) || !slices.Equal(doneWith, []string{"With Agent Alice", "With Agent Bob"}) {
		t.Fatalf("held on %v, told %q", heldOn, doneWith)
	}
	for _, cal := range poolCals {
		all := h.listAllWith(cal, bearer(adminKey)...)
		if len(all) != 1 || all[0].Status != "confirmed" || !all[0].Start.Equal(target) {
			t.Fatalf("%s: bookings %+v", cal, all)
		}
	}
}

// TestPoolPageKey: the pool's page is served only with a publishable key
// listing every calendar of the pool; otherwise, and for a pool that does
// not exist, it is 404 like a calendar without a page, and a browser
// shows no booking component.
func TestPoolPageKey(t *testing.T) {
	h := poolPageHarness(t)
	for _, cal := range poolCals {
		h.putCalendar(cal, map[string]any{"name": cal, "timezone": "UTC"})
	}
	h.putPool("front", poolCals)
	page := func(pool, key string) response {
		return h.do("GET", strings.TrimPrefix(h.poolURL(pool, key, time.Time{}), h.URL), nil)
	}
	if r := page("front", poolPageKey); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `pool="front"`) {
		t.Fatalf("the page with a key listing every calendar: %d %s", r.Status, r.Body)
	}
	for _, c := range []struct{ name, pool, key string }{
		{"a key missing a calendar", "front", partPageKey},
		{"an admin key", "front", adminKey},
		{"no key", "front", ""},
		{"a pool that does not exist", "nope", poolPageKey},
	} {
		if r := page(c.pool, c.key); r.Status != http.StatusNotFound || r.errorCode(t) != "not_found" {
			t.Errorf("%s: %d %s", c.name, r.Status, r.Body)
		}
	}
	ctx := newVisitor(t, newBrowser(t), "UTC")
	run(t, ctx, "open the page with a key missing a calendar", chromedp.Navigate(h.poolURL("front", partPageKey, time.Time{})))
	shown := get(t, ctx, "the page", chromedp.Evaluate[string](`(document.querySelector('bookline-booking') ? 'component ' : '') + document.body.innerText`))
	if strings.HasPrefix(shown, "component") || !strings.Contains(shown, "not_found") {
		t.Fatalf("a browser shows %q", shown)
	}
}
