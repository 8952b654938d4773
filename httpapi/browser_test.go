package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/bookline/bookline/httpapi"
)

// Browser tests: the booking page in a real headless Chromium (Debian's
// chromium package, driven over the DevTools protocol by chromedp) against
// a real bookline (the harness: embedded NATS, bbolt, the writers).

// browserTimeout bounds every browser step: a step waits for what it needs
// to see (WaitVisible, Poll) up to this long, never a fixed time.
const browserTimeout = 30 * time.Second

// chromiumPath finds the browser, or skips the test loudly: the browser
// tests are part of the default suite, and a skip must not go unnoticed.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BOOKLINE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "SKIPPING BROWSER TEST: no chromium found (install it: apt-get install -y chromium, or set BOOKLINE_CHROMIUM); the booking page is NOT tested"
	t.Log(msg)
	fmt.Fprintln(os.Stderr, "!!! "+t.Name()+": "+msg)
	t.Skip(msg)
	return ""
}

// newBrowser starts a headless Chromium for the test and returns the
// context of its first tab.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // tests run as root in containers
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(900, 1000),
	)
	// Chromium now and then exits at start on a machine busy with other
	// test packages ("chrome failed to start", nothing else said): a
	// fresh process, with a fresh profile, is tried up to three times.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(actx)
		if err = chromedp.Do(ctx); err == nil {
			t.Cleanup(func() { cancel(); cancelAlloc() })
			return ctx
		}
		cancel()
		cancelAlloc()
		t.Logf("start chromium, attempt %d: %v", attempt, err)
	}
	t.Fatalf("start chromium: %v", err)
	return nil
}

// newVisitor opens a tab in a browser context of its own (its own cookies
// and storage: another visitor) in time zone tz.
func newVisitor(t *testing.T, browser context.Context, tz string) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	if _, err := chromedp.Call(ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: tz}); err != nil {
		t.Fatalf("time zone %s: %v", tz, err)
	}
	return ctx
}

// pageText is the component's text, for failure messages.
func pageText(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('bookline-booking') || document.body).innerText`))
	return s
}

// run runs browser steps with the step deadline.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, browserTimeout)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		t.Fatalf("%s: %v\npage text:\n%s", what, err, pageText(ctx))
	}
}

// get runs one browser action that returns a value, with the step deadline.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, browserTimeout)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatalf("%s: %v\npage text:\n%s", what, err, pageText(ctx))
	}
	return v
}

// slotsOf reads the listed starts: data-start (UTC, from the API) and
// data-local (wall time in the visitor's zone).
func slotsOf(t *testing.T, ctx context.Context) (starts, locals []string) {
	t.Helper()
	s := get(t, ctx, "read slots", chromedp.Evaluate[struct{ Starts, Locals []string }](`({
		Starts: [...document.querySelectorAll('.bl-slot')].map(b => b.dataset.start),
		Locals: [...document.querySelectorAll('.bl-slot')].map(b => b.dataset.local)})`))
	return s.Starts, s.Locals
}

// textOf is the text content of the first element matching sel.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return get(t, ctx, "text of "+sel, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).textContent`, sel)))
}

// pageHarness is bookline with an admin key and the publishable key
// "page" for calendar clinic.
func pageHarness(t *testing.T) *harness {
	return start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = pageKeyring(t)
		c.PageRateLimit, c.PageRateBurst = 1000, 1000 // every tab is 127.0.0.1
	}})
}

func (h *harness) putCalendar(id string, body map[string]any) {
	h.t.Helper()
	r := h.do("PUT", "/v1/calendars/"+id, body, bearer(adminKey)...)
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		h.t.Fatalf("PUT calendar %s: %d %s", id, r.Status, r.Body)
	}
}

func (h *harness) pageURL(cal string, day time.Time) string {
	return h.URL + "/book/" + cal + "?key=" + url.QueryEscape(pageKey) + "&date=" + day.Format(time.DateOnly)
}

// futureDay is a date a week from now, in UTC.
func futureDay() time.Time {
	y, m, d := time.Now().UTC().AddDate(0, 0, 7).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

func slotSel(start time.Time) chromedp.CSS {
	return chromedp.CSS(`.bl-slot[data-start="` + start.UTC().Format(time.RFC3339) + `"]`)
}

// TestBookingPageEndToEnd books through the page with the keyboard where
// a visitor would: choose a start (Enter on its button), type a name and a
// note, submit (Enter), confirm; then checks the confirmation, its .ics
// and the booking bookline stored.
func TestBookingPageEndToEnd(t *testing.T) {
	h := pageHarness(t)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	h.putCalendar("clinic", map[string]any{"name": "Dr. Weber", "timezone": "Europe/Berlin", "slot_step_minutes": 30,
		"allowed_durations_minutes": []int{30}, "weekly_hours": allWeek("09:00", "12:00")})
	day := futureDay()
	ctx := newVisitor(t, newBrowser(t), "Europe/Berlin")
	y, m, d := day.Date()
	want := time.Date(y, m, d, 10, 0, 0, 0, berlin)

	run(t, ctx, "open the page",
		chromedp.Navigate(h.pageURL("clinic", day)),
		chromedp.WaitVisible(slotSel(want)),
	)
	starts, locals := slotsOf(t, ctx)
	var wantLocals []string
	for i := 0; i < 6; i++ {
		wantLocals = append(wantLocals, time.Date(y, m, d, 9, 30*i, 0, 0, berlin).Format("2006-01-02T15:04"))
	}
	if !slices.Equal(locals, wantLocals) || starts[2] != want.UTC().Format(time.RFC3339) {
		t.Fatalf("listed %v %v, want %v", starts, locals, wantLocals)
	}
	title := textOf(t, ctx, ".bl-title")
	run(t, ctx, "choose a start with the keyboard",
		chromedp.Focus(slotSel(want)),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS(".bl-name")),
	)
	if title != "Book a time with Dr. Weber" {
		t.Errorf("title %q", title)
	}
	focused := get(t, ctx, "the focused element", chromedp.Evaluate[string](`document.activeElement.className`))
	if focused != "bl-name" {
		t.Errorf("focus on %q after choosing, want the name field", focused)
	}
	run(t, ctx, "enter the details and hold",
		chromedp.SendKeys(chromedp.CSS(".bl-note"), "First visit, bring X-rays"),
		chromedp.SendKeys(chromedp.CSS(".bl-name"), "Ada Lovelace\r"),
		chromedp.WaitVisible(chromedp.CSS(".bl-confirm")),
	)
	countdown := textOf(t, ctx, ".bl-countdown")
	run(t, ctx, "confirm",
		chromedp.Click(chromedp.CSS(".bl-confirm")),
		chromedp.WaitVisible(chromedp.CSS(".bl-ics")),
	)
	if !strings.HasPrefix(countdown, "Held for you for ") {
		t.Errorf("countdown %q", countdown)
	}

	all := h.listAllWith("clinic", bearer(adminKey)...)
	if len(all) != 1 {
		t.Fatalf("bookings %+v", all)
	}
	b := all[0]
	if b.Status != "confirmed" || b.Customer != "Ada Lovelace" || !b.Start.Equal(want) || !b.End.Equal(want.Add(30*time.Minute)) {
		t.Fatalf("booking %+v", b)
	}
	var meta map[string]string
	if err := json.Unmarshal(b.Metadata, &meta); err != nil || meta["note"] != "First visit, bring X-rays" || meta["source"] != "booking-page" {
		t.Errorf("metadata %s", b.Metadata)
	}

	done, live := textOf(t, ctx, ".bl-done"), textOf(t, ctx, ".bl-live")
	href := get(t, ctx, "the .ics link", chromedp.Evaluate[string](`document.querySelector('.bl-ics').href`))
	if !strings.Contains(done, b.ID) {
		t.Errorf("confirmation %q lacks the booking id %s", done, b.ID)
	}
	if !strings.HasPrefix(live, "Your booking is confirmed") {
		t.Errorf("live region %q", live)
	}
	checkICS(t, href, b)
}

// checkICS checks the confirmation's download: a valid iCalendar object
// with CRLF lines, UTC times and the booking id as UID.
func checkICS(t *testing.T, href string, b booking) {
	t.Helper()
	const prefix = "data:text/calendar;charset=utf-8,"
	if !strings.HasPrefix(href, prefix) {
		t.Fatalf("ics href %.60q", href)
	}
	text, err := url.PathUnescape(strings.TrimPrefix(href, prefix))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(text, "\r\n") || strings.Contains(strings.ReplaceAll(text, "\r\n", ""), "\n") {
		t.Errorf("ics lines are not CRLF: %q", text)
	}
	unfolded := strings.ReplaceAll(text, "\r\n ", "")
	lines := strings.Split(strings.TrimSuffix(unfolded, "\r\n"), "\r\n")
	for _, l := range strings.Split(strings.TrimSuffix(text, "\r\n"), "\r\n") {
		if len(l) > 75 {
			t.Errorf("ics line longer than 75 octets: %q", l)
		}
	}
	props := map[string]string{}
	for _, l := range lines {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			t.Errorf("ics line without a value: %q", l)
		}
		if _, seen := props[k]; !seen {
			props[k] = v
		}
	}
	const icsUTC = "20060102T150405Z"
	for k, want := range map[string]string{
		"BEGIN": "VCALENDAR", "VERSION": "2.0", "UID": b.ID,
		"DTSTART": b.Start.UTC().Format(icsUTC), "DTEND": b.End.UTC().Format(icsUTC),
		"SUMMARY": "Booking with Dr. Weber", "DESCRIPTION": `First visit\, bring X-rays`,
	} {
		if props[k] != want {
			t.Errorf("ics %s = %q, want %q\n%s", k, props[k], want, text)
		}
	}
	if _, err := time.Parse(icsUTC, props["DTSTAMP"]); err != nil {
		t.Errorf("ics DTSTAMP %q", props["DTSTAMP"])
	}
	if lines[0] != "BEGIN:VCALENDAR" || lines[len(lines)-1] != "END:VCALENDAR" || !slices.Contains(lines, "BEGIN:VEVENT") || !slices.Contains(lines, "END:VEVENT") || props["PRODID"] == "" {
		t.Errorf("ics structure:\n%s", text)
	}
}

func allWeek(from, to string) map[string]any {
	w := map[string]any{}
	for _, d := range []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"} {
		w[d] = []map[string]string{{"start": from, "end": to}}
	}
	return w
}

// TestBookingPageRace: two visitors (two browser contexts) choose the same
// start and hold it at the same moment. Exactly one gets to confirm it;
// the other is told the time was just taken and sees the day refreshed
// without it.
func TestBookingPageRace(t *testing.T) {
	h := pageHarness(t)
	h.putCalendar("clinic", map[string]any{"name": "Dr. Weber", "timezone": "UTC", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": allWeek("09:00", "13:00")})
	day := futureDay()
	target := day.Add(10 * time.Hour)
	browser := newBrowser(t)
	visitors := []context.Context{newVisitor(t, browser, "UTC"), newVisitor(t, browser, "UTC")}
	for i, v := range visitors {
		run(t, v, "visitor chooses the start",
			chromedp.Navigate(h.pageURL("clinic", day)),
			chromedp.WaitVisible(slotSel(target)),
			chromedp.Click(slotSel(target)),
			chromedp.WaitVisible(chromedp.CSS(".bl-name")),
			chromedp.SendKeys(chromedp.CSS(".bl-name"), fmt.Sprintf("Visitor %d", i)),
		)
	}
	// Both press "Hold this time" together.
	var wg sync.WaitGroup
	errs := make([]error, len(visitors))
	for i, v := range visitors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(v, browserTimeout)
			defer cancel()
			errs[i] = chromedp.Do(ctx, chromedp.Click(chromedp.CSS(".bl-hold")))
		}()
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
	winners := 0
	for i, v := range visitors {
		switch {
		case outcome[i] == "held":
			winners++
			run(t, v, "the winner confirms", chromedp.Click(chromedp.CSS(".bl-confirm")), chromedp.WaitVisible(chromedp.CSS(".bl-ics")))
		case strings.Contains(outcome[i], "just taken"):
			// The day is listed again, without the taken start.
			run(t, v, "the loser's day is refreshed", chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelectorAll('.bl-slot').length === 3 && !document.querySelector(%q) && !document.querySelector('.bl-pick').hidden`,
				string(slotSel(target))), chromedp.WithPollingTimeout(browserTimeout)))
		default:
			t.Fatalf("visitor %d: outcome %q", i, outcome[i])
		}
	}
	if winners != 1 {
		t.Fatalf("%d visitors got the hold: %q", winners, outcome)
	}
	all := h.listAllWith("clinic", bearer(adminKey)...)
	if len(all) != 1 || all[0].Status != "confirmed" || !all[0].Start.Equal(target) {
		t.Fatalf("bookings %+v", all)
	}
}

// nextDSTDay is the first date after a week from now on which zone's day
// is hours long: 23 (spring forward) or 25 (fall back).
func nextDSTDay(t *testing.T, loc *time.Location, hours int) time.Time {
	t.Helper()
	d := futureDay()
	for i := 0; i < 800; i++ {
		y, m, dd := d.AddDate(0, 0, i).Date()
		a, b := time.Date(y, m, dd, 0, 0, 0, 0, loc), time.Date(y, m, dd+1, 0, 0, 0, 0, loc)
		if b.Sub(a) == time.Duration(hours)*time.Hour {
			return time.Date(y, m, dd, 0, 0, 0, 0, time.UTC)
		}
	}
	t.Fatalf("no DST change in %s", loc)
	return time.Time{}
}

// localStarts is what the page must list for day in zone loc on a calendar
// open around the clock with hourly starts: every UTC hour within the
// local day, labelled with its local wall time.
func localStarts(day time.Time, loc *time.Location) (starts, locals []string) {
	y, m, d := day.Date()
	from, to := time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	for t := from; t.Before(to); t = t.Add(time.Hour) {
		starts = append(starts, t.UTC().Format(time.RFC3339))
		locals = append(locals, t.In(loc).Format("2006-01-02T15:04"))
	}
	return starts, locals
}

// TestBookingPageDSTDay: on the days the visitor's zone changes its clocks
// (spring forward in America/New_York: 23 hours; fall back in
// Europe/Berlin: 25, with 02:00 twice), the page lists exactly the starts of
// that local day with their local times; switching the zone in the page
// lists the day of the new zone.
func TestBookingPageDSTDay(t *testing.T) {
	h := pageHarness(t)
	h.putCalendar("clinic", map[string]any{"name": "Round the clock", "timezone": "UTC", "slot_step_minutes": 60, "allowed_durations_minutes": []int{60}})
	browser := newBrowser(t)
	for _, c := range []struct {
		zone  string
		hours int
	}{{"America/New_York", 23}, {"Europe/Berlin", 25}} {
		zone := c.zone
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		day := nextDSTDay(t, loc, c.hours)
		wantStarts, wantLocals := localStarts(day, loc)
		if len(wantStarts) != c.hours {
			t.Fatalf("%s %s: %d starts expected", zone, day, len(wantStarts))
		}
		ctx := newVisitor(t, browser, zone)
		run(t, ctx, "open the page on "+zone+"'s DST day",
			chromedp.Navigate(h.pageURL("clinic", day)),
			chromedp.WaitVisible(chromedp.CSS(".bl-slot")),
		)
		shownZone := get(t, ctx, "the zone select", chromedp.Value(chromedp.CSS(".bl-tz")))
		if shownZone != zone {
			t.Errorf("zone select shows %q, want the visitor's %s", shownZone, zone)
		}
		starts, locals := slotsOf(t, ctx)
		if !slices.Equal(starts, wantStarts) || !slices.Equal(locals, wantLocals) {
			t.Errorf("%s %s: listed\n%v\n%v\nwant\n%v\n%v", zone, day.Format(time.DateOnly), starts, locals, wantStarts, wantLocals)
		}
		// A repeated hour is told apart on the buttons (by its zone name).
		labels := get(t, ctx, "slot labels", chromedp.Evaluate[[]string](`[...document.querySelectorAll('.bl-slot')].map(b => b.textContent)`))
		if len(slices.Compact(slices.Sorted(slices.Values(labels)))) != len(labels) {
			t.Errorf("%s: two starts with one label: %q", zone, labels)
		}
		// Switch the zone with the page's select: the same date, in UTC.
		wantStarts, wantLocals = localStarts(day, time.UTC)
		run(t, ctx, "switch to UTC",
			chromedp.SetValue(chromedp.CSS(".bl-tz"), "UTC"),
			chromedp.Evaluate[chromedp.Void](`document.querySelector('.bl-tz').dispatchEvent(new Event('change'))`),
			chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelectorAll('.bl-slot').length === 24 && document.querySelector('.bl-slot').dataset.start === %q`, wantStarts[0]), chromedp.WithPollingTimeout(browserTimeout)),
		)
		starts, locals = slotsOf(t, ctx)
		if !slices.Equal(starts, wantStarts) || !slices.Equal(locals, wantLocals) {
			t.Errorf("%s switched to UTC: listed %v %v", zone, starts, locals)
		}
	}
	// Today: the calendar has no minimum notice, so it would accept starts
	// earlier today, but the page offers only those still ahead.
	ctx := newVisitor(t, browser, "UTC")
	now := time.Now()
	run(t, ctx, "open today", chromedp.Navigate(h.pageURL("clinic", now.UTC())),
		chromedp.Poll[chromedp.Void](`document.querySelector('.bl-slots') && !document.querySelector('.bl-slots').hasAttribute('aria-busy') && !document.querySelector('.bl-pick').hidden`, chromedp.WithPollingTimeout(browserTimeout)))
	starts, _ := slotsOf(t, ctx)
	for _, s := range starts {
		if st, err := time.Parse(time.RFC3339, s); err != nil || !st.After(now) {
			t.Errorf("today's page offers %s, which is not after %s", s, now.Format(time.RFC3339))
		}
	}
	// One fewer when an hour began while the page loaded.
	if n := 23 - now.UTC().Hour(); len(starts) != n && len(starts) != n-1 {
		t.Errorf("today's page offers %d starts, want the %d hours left", len(starts), n)
	}
}

// TestBookingPageExpiredHold: a hold that runs out before the visitor
// confirms is announced as expired, with a retry that holds the time anew
// and books it.
func TestBookingPageExpiredHold(t *testing.T) {
	h := pageHarness(t)
	h.putCalendar("clinic", map[string]any{"name": "Dr. Weber", "timezone": "UTC", "slot_step_minutes": 60, "allowed_durations_minutes": []int{60}})
	day := futureDay()
	target := day.Add(15 * time.Hour)
	ctx := newVisitor(t, newBrowser(t), "UTC")
	run(t, ctx, "hold for two seconds and let it expire",
		chromedp.Navigate(h.pageURL("clinic", day)),
		chromedp.WaitVisible(slotSel(target)),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('bookline-booking').setAttribute('hold-ttl', '2')`),
		chromedp.Click(slotSel(target)),
		chromedp.SendKeys(chromedp.CSS(".bl-name"), "Grace Hopper\r"),
		chromedp.WaitVisible(chromedp.CSS(".bl-confirm")),
		chromedp.WaitVisible(chromedp.CSS(".bl-retry")),
	)
	alert := textOf(t, ctx, ".bl-alert")
	if !strings.Contains(alert, "expired") {
		t.Fatalf("alert %q", alert)
	}
	if f := get(t, ctx, "the focused element", chromedp.Evaluate[string](`document.activeElement.className`)); f != "bl-retry" {
		t.Errorf("focus on %q after the expiry, want the retry button", f)
	}
	run(t, ctx, "retry and confirm in time",
		chromedp.Evaluate[chromedp.Void](`document.querySelector('bookline-booking').setAttribute('hold-ttl', '300')`),
		chromedp.Click(chromedp.CSS(".bl-retry")),
		chromedp.WaitVisible(chromedp.CSS(".bl-confirm")),
		chromedp.Click(chromedp.CSS(".bl-confirm")),
		chromedp.WaitVisible(chromedp.CSS(".bl-ics")),
	)
	all := h.listAllWith("clinic", bearer(adminKey)...)
	if len(all) != 1 || all[0].Customer != "Grace Hopper" || !all[0].Start.Equal(target) {
		t.Fatalf("bookings %+v", all)
	}
}

// TestBookingPageAccessibleAndPhone: every form control has a label, there
// is a live region, and on a phone-sized screen nothing is wider than the
// screen. With BOOKLINE_WRITE_SCREENSHOT=1 it writes docs/booking-page.png
// (make screenshot).
func TestBookingPageAccessibleAndPhone(t *testing.T) {
	h := pageHarness(t)
	day := futureDay()
	// Two closed days, for the month view (and the picture) to show some.
	closed := []map[string]any{{"date": day.AddDate(0, 0, 1).Format(time.DateOnly), "closed": true},
		{"date": day.AddDate(0, 0, 2).Format(time.DateOnly), "closed": true}}
	h.putCalendar("clinic", map[string]any{"name": "Dr. Weber", "timezone": "Europe/Berlin", "slot_step_minutes": 30,
		"allowed_durations_minutes": []int{30, 60}, "weekly_hours": allWeek("09:00", "17:00"), "date_overrides": closed})
	ctx := newVisitor(t, newBrowser(t), "Europe/Berlin")
	run(t, ctx, "open the page",
		chromedp.Navigate(h.pageURL("clinic", day)),
		chromedp.WaitVisible(chromedp.CSS(".bl-slot")),
	)
	unlabelled := get(t, ctx, "unlabelled controls", chromedp.Evaluate[[]string](`[...document.querySelectorAll('bookline-booking input, bookline-booking select, bookline-booking textarea')]
			.filter(e => !(e.id && document.querySelector('label[for="' + e.id + '"]')) && !e.getAttribute('aria-label')).map(e => e.className)`))
	live := get(t, ctx, "live regions", chromedp.Evaluate[int](`document.querySelectorAll('bookline-booking [aria-live], bookline-booking [role=alert]').length`))
	if len(unlabelled) > 0 || live < 2 {
		t.Errorf("unlabelled controls %v, %d live regions", unlabelled, live)
	}
	// The month view: a grid named by its month, every day and button
	// named, one day reached by Tab.
	run(t, ctx, "month view", settled())
	grid := get(t, ctx, "the month grid", chromedp.Evaluate[string](`(() => {
		const g = document.querySelector('bookline-booking [role=grid]');
		const name = g && document.getElementById(g.getAttribute('aria-labelledby'));
		const unnamed = [...document.querySelectorAll('bookline-booking button')].filter(b => !(b.getAttribute('aria-label') || b.textContent.trim()));
		const days = [...document.querySelectorAll('.bl-cal-day')];
		return (name ? name.textContent : 'no grid') + (unnamed.length ? ', unnamed buttons' : '') +
			(days.every(b => b.getAttribute('aria-label')) ? '' : ', unlabelled days') +
			(days.filter(b => b.tabIndex === 0).length === 1 ? '' : ', not one day to Tab to');
	})()`))
	if grid != day.Format("January 2006") {
		t.Errorf("month grid: %q", grid)
	}
	run(t, ctx, "phone screen",
		chromedp.EmulateViewport(375, 740, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Poll[chromedp.Void](`document.documentElement.clientWidth === 375`, chromedp.WithPollingTimeout(browserTimeout)),
	)
	overflow := get(t, ctx, "overflow", chromedp.Evaluate[bool](`document.documentElement.scrollWidth > document.documentElement.clientWidth ||
			[...document.querySelectorAll('bookline-booking *')].some(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)`))
	if overflow {
		t.Errorf("the page is wider than a 375px phone screen")
	}
	run(t, ctx, "desktop screen",
		chromedp.EmulateViewport(760, 900),
		chromedp.Poll[chromedp.Void](`document.documentElement.clientWidth === 760`, chromedp.WithPollingTimeout(browserTimeout)),
	)
	png := get(t, ctx, "screenshot", chromedp.Screenshot(chromedp.CSS("bookline-booking")))
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	if os.Getenv("BOOKLINE_WRITE_SCREENSHOT") == "1" {
		out := filepath.Join("..", "docs", "booking-page.png")
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", out, len(png))
	}
}

// openURL is the page's link without ?date=: it opens on the first day
// with free times.
func (h *harness) openURL(cal string) string {
	return h.URL + "/book/" + cal + "?key=" + url.QueryEscape(pageKey)
}

// localDate is the date of t in loc, as the page names days.
func localDate(t time.Time, loc *time.Location) string { return t.In(loc).Format(time.DateOnly) }

// freeDays is what the availability API says: the dates in loc with a
// free start of d in [from, to), asked in pieces the API accepts.
func (h *harness) freeDays(cal string, loc *time.Location, from, to time.Time, d time.Duration) map[string]bool {
	h.t.Helper()
	days := map[string]bool{}
	for a := from; a.Before(to); a = a.Add(30 * 24 * time.Hour) {
		b := a.Add(30 * 24 * time.Hour)
		if b.After(to) {
			b = to
		}
		r := h.do("GET", fmt.Sprintf("/v1/calendars/%s/availability?from=%s&to=%s&duration=%s", cal,
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

// recordFetches makes the visitor's tab keep the URL of every fetch the
// page makes (window.blFetches), from the next page loaded on.
func recordFetches(t *testing.T, ctx context.Context) {
	t.Helper()
	_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
		window.blFetches = [];
		const realFetch = window.fetch;
		window.fetch = function (u) { window.blFetches.push(String(u)); return realFetch.apply(this, arguments); };`})
	if err != nil {
		t.Fatalf("record fetches: %v", err)
	}
}

// availabilityQueries are the distinct availability queries the page
// made, as [from, to) ranges, in order.
func availabilityQueries(t *testing.T, ctx context.Context) [][2]time.Time {
	t.Helper()
	urls := get(t, ctx, "the page's fetches", chromedp.Evaluate[[]string](`window.blFetches`))
	var out [][2]time.Time
	seen := map[string]bool{}
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil || !strings.HasSuffix(p.Path, "/availability") || seen[u] {
			continue // a retry after 429 asks the same again
		}
		seen[u] = true
		from, err1 := time.Parse(time.RFC3339, p.Query().Get("from"))
		to, err2 := time.Parse(time.RFC3339, p.Query().Get("to"))
		if err1 != nil || err2 != nil {
			t.Fatalf("availability query %s", u)
		}
		out = append(out, [2]time.Time{from, to})
	}
	return out
}

// monthView is what the month grid shows.
type monthView struct {
	Title              string
	PrevOff, NextOff   bool
	Days, Free, Marked []string // every day; not aria-disabled; styled free
	Labels             []string
	Selected           string // the date of the chosen day, "" if none
	Tabbable           int    // days the Tab key reaches
}

func readMonth(t *testing.T, ctx context.Context) monthView {
	t.Helper()
	return get(t, ctx, "read the month view", chromedp.Evaluate[monthView](`(() => {
		const days = [...document.querySelectorAll('.bl-cal-day')];
		const sel = document.querySelector('td[aria-selected="true"] .bl-cal-day');
		return {
			Title: document.querySelector('.bl-month-title').textContent,
			PrevOff: document.querySelector('.bl-prev').disabled,
			NextOff: document.querySelector('.bl-next').disabled,
			Days: days.map(b => b.dataset.date),
			Free: days.filter(b => b.getAttribute('aria-disabled') !== 'true').map(b => b.dataset.date),
			Marked: days.filter(b => b.classList.contains('bl-free')).map(b => b.dataset.date),
			Labels: days.map(b => b.getAttribute('aria-label')),
			Selected: sel ? sel.dataset.date : '',
			Tabbable: days.filter(b => b.tabIndex === 0).length,
		};
	})()`))
}

// settled waits until the page has marked the month's days and listed a
// day (or said that nothing is free): nothing is loading any more.
func settled() chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](`(() => {
		const weeks = document.querySelector('.bl-weeks'), slots = document.querySelector('.bl-slots');
		const days = [...document.querySelectorAll('.bl-cal-day')];
		return !!weeks && days.length > 0 && !weeks.hasAttribute('aria-busy') && !slots.hasAttribute('aria-busy') &&
			!days.some(b => b.getAttribute('aria-label').endsWith(', loading')) && !document.querySelector('.bl-pick').hidden;
	})()`, chromedp.WithPollingTimeout(browserTimeout))
}

// checkMonth checks that the shown month marks exactly the days the
// availability API gave free starts (want), and labels every day by it.
func checkMonth(t *testing.T, v monthView, want map[string]bool) {
	t.Helper()
	var wantFree []string
	for _, d := range v.Days {
		if want[d] {
			wantFree = append(wantFree, d)
		}
	}
	if len(v.Days) < 28 || !slices.Equal(v.Free, wantFree) || !slices.Equal(v.Marked, wantFree) {
		t.Errorf("%s: selectable %v, marked %v; the API has free times on %v", v.Title, v.Free, v.Marked, wantFree)
	}
	if v.Tabbable != 1 {
		t.Errorf("%s: the Tab key reaches %d days, want one (the arrow keys move on)", v.Title, v.Tabbable)
	}
	for i, d := range v.Days {
		if want[d] != strings.HasSuffix(v.Labels[i], ", free times") || (!want[d] && !strings.HasSuffix(v.Labels[i], ", no free times")) {
			t.Errorf("%s: day %s labelled %q", v.Title, d, v.Labels[i])
		}
	}
}

// awayFromEdges waits, when the wall clock in loc is within two minutes
// before one of the given hours (0 is midnight), until that hour has
// passed: a test whose expectations depend on the day or on which starts
// the horizon holds must not straddle it.
func awayFromEdges(t *testing.T, loc *time.Location, hours ...int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		now := time.Now().In(loc)
		near := false
		for _, hr := range hours {
			edge := time.Date(now.Year(), now.Month(), now.Day(), hr, 0, 0, 0, loc)
			if !edge.After(now) {
				edge = edge.AddDate(0, 0, 1)
			}
			if edge.Sub(now) < 2*time.Minute {
				near = true
			}
		}
		if !near {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the clock stayed near an edge of %v in %s", hours, loc)
		}
		time.Sleep(time.Second) // waiting for the wall clock itself
	}
}

// TestBookingPageOpensOnFirstFreeDay: a calendar closed today and
// tomorrow (date overrides) opens, without ?date=, on the day after
// tomorrow, chosen in the month view, with that day's times listed.
func TestBookingPageOpensOnFirstFreeDay(t *testing.T) {
	h := pageHarness(t)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	awayFromEdges(t, berlin, 0) // "today" must not change while the test runs
	now := time.Now().In(berlin)
	y, m, d := now.Date()
	day := func(n int) time.Time { return time.Date(y, m, d+n, 0, 0, 0, 0, berlin) }
	h.putCalendar("clinic", map[string]any{"name": "Dr. Weber", "timezone": "Europe/Berlin", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": allWeek("09:00", "17:00"),
		"date_overrides": []map[string]any{{"date": localDate(day(0), berlin), "closed": true}, {"date": localDate(day(1), berlin), "closed": true}}})
	ctx := newVisitor(t, newBrowser(t), "Europe/Berlin")
	run(t, ctx, "open the page without a date", chromedp.Navigate(h.openURL("clinic")), settled())

	first := day(2)
	var wantLocals []string
	for hour := 9; hour < 17; hour++ {
		wantLocals = append(wantLocals, time.Date(first.Year(), first.Month(), first.Day(), hour, 0, 0, 0, berlin).Format("2006-01-02T15:04"))
	}
	_, locals := slotsOf(t, ctx)
	v := readMonth(t, ctx)
	if v.Selected != localDate(first, berlin) || !slices.Equal(locals, wantLocals) {
		t.Fatalf("opened on %q listing %v; want %s listing %v\npage text:\n%s", v.Selected, locals, localDate(first, berlin), wantLocals, pageText(ctx))
	}
	if title := textOf(t, ctx, ".bl-slots-title"); !strings.Contains(title, strconv.Itoa(first.Day())) {
		t.Errorf("times titled %q", title)
	}
	for _, closed := range []time.Time{day(0), day(1)} {
		if slices.Contains(v.Days, localDate(closed, berlin)) && slices.Contains(v.Free, localDate(closed, berlin)) {
			t.Errorf("closed day %s is selectable", localDate(closed, berlin))
		}
	}
}

// TestBookingPageMonthMarks: the month view marks, month by month from
// today to the horizon, exactly the days on which the availability API has
// a free start; a fully booked day, a closed day and weekends are shown
// unavailable and cannot be chosen; the months end at today and at the
// horizon; choosing a marked day lists its times. The page asks for each
// month once (not for each day) and every query stays within the budget.
func TestBookingPageMonthMarks(t *testing.T) {
	h := pageHarness(t)
	ny, _ := time.LoadLocation("America/New_York")
	// Today changes at midnight, and the horizon's last day gains its
	// first start (09:00) at 09:00: neither may happen mid-test.
	awayFromEdges(t, ny, 0, 9)
	now := time.Now().In(ny)
	y, m, d := now.Date()
	// The first weekday n or more days from today, and its n.
	weekdayFrom := func(n int) (time.Time, int) {
		for ; ; n++ {
			if t := time.Date(y, m, d+n, 0, 0, 0, 0, ny); t.Weekday() != time.Saturday && t.Weekday() != time.Sunday {
				return t, n
			}
		}
	}
	booked, n := weekdayFrom(3)
	closed, _ := weekdayFrom(n + 1)
	hours := map[string]any{"sat": []any{}, "sun": []any{}}
	for _, wd := range []string{"mon", "tue", "wed", "thu", "fri"} {
		hours[wd] = []map[string]string{{"start": "09:00", "end": "12:00"}}
	}
	const horizon = 45
	h.putCalendar("clinic", map[string]any{"name": "Dr. Weber", "timezone": "America/New_York", "slot_step_minutes": 60,
		"allowed_durations_minutes": []int{60}, "weekly_hours": hours, "horizon_days": horizon,
		"date_overrides": []map[string]any{{"date": localDate(now, ny), "closed": true}, {"date": localDate(closed, ny), "closed": true}}})
	for hour := 9; hour < 12; hour++ {
		start := time.Date(booked.Year(), booked.Month(), booked.Day(), hour, 0, 0, 0, ny)
		h.mustStatus(h.do("POST", "/v1/calendars/clinic/bookings", bookingBody(start, time.Hour, "Booked"), bearer(adminKey)...), http.StatusCreated)
	}
	want := h.freeDays("clinic", ny, now.Truncate(time.Minute), now.AddDate(0, 0, horizon+1), time.Hour)
	if want[localDate(booked, ny)] || want[localDate(closed, ny)] || len(want) < 20 {
		t.Fatalf("the API's free days %v", want)
	}

	ctx := newVisitor(t, newBrowser(t), "America/New_York")
	recordFetches(t, ctx)
	run(t, ctx, "open the page", chromedp.Navigate(h.openURL("clinic")), settled())
	// Back to today's month, then forward month by month to the horizon.
	for v := readMonth(t, ctx); !v.PrevOff; v = readMonth(t, ctx) {
		run(t, ctx, "previous month", chromedp.Click(chromedp.CSS(".bl-prev")), settled())
	}
	lastDay := localDate(now.Add(horizon*24*time.Hour), ny)
	var months []monthView
	for {
		v := readMonth(t, ctx)
		checkMonth(t, v, want)
		months = append(months, v)
		if v.NextOff {
			break
		}
		if len(months) > 4 {
			t.Fatalf("more than 4 months before a %d-day horizon", horizon)
		}
		run(t, ctx, "next month", chromedp.Click(chromedp.CSS(".bl-next")), settled())
	}
	if first, last := months[0], months[len(months)-1]; !slices.Contains(first.Days, localDate(now, ny)) || !slices.Contains(last.Days, lastDay) {
		t.Errorf("months %q..%q do not run from today (%s) to the horizon (%s)", first.Title, last.Title, localDate(now, ny), lastDay)
	}

	// The fully booked and the closed day cannot be chosen; a marked day can.
	for _, day := range []time.Time{booked, closed} {
		sel := chromedp.CSS(`.bl-cal-day[data-date="` + localDate(day, ny) + `"]`)
		for readMonth(t, ctx).Title != dateTitle(day) {
			run(t, ctx, "back to "+dateTitle(day), chromedp.Click(chromedp.CSS(".bl-prev")), settled())
		}
		before := readMonth(t, ctx).Selected
		run(t, ctx, "click an unavailable day", chromedp.Click(sel), settled())
		if v := readMonth(t, ctx); v.Selected != before || slices.Contains(v.Free, localDate(day, ny)) {
			t.Errorf("unavailable day %s: chosen %q (before %q)", localDate(day, ny), v.Selected, before)
		}
	}
	v := readMonth(t, ctx)
	pick := v.Free[len(v.Free)-1]
	run(t, ctx, "choose a marked day with the keyboard",
		chromedp.Focus(chromedp.CSS(`.bl-cal-day[data-date="`+pick+`"]`)), chromedp.KeyEvent("\r"), settled(),
		chromedp.Poll[chromedp.Void](`document.querySelector('.bl-slot') !== null`, chromedp.WithPollingTimeout(browserTimeout)))
	_, locals := slotsOf(t, ctx)
	if readMonth(t, ctx).Selected != pick || len(locals) == 0 || !strings.HasPrefix(locals[0], pick) {
		t.Errorf("chose %s: listed %v", pick, locals)
	}
	// The arrow keys move by day; Page Up or Down by month, to the same
	// day of the other month's grid (the last, if it is shorter).
	focused := func() string {
		return get(t, ctx, "the focused day", chromedp.Evaluate[string](`document.activeElement.dataset.date || document.activeElement.className`))
	}
	picked, _ := time.Parse(time.DateOnly, pick)
	left := picked.AddDate(0, 0, -1)
	run(t, ctx, "arrow left", chromedp.KeyEvent(kb.ArrowLeft), settled())
	if f := focused(); f != left.Format(time.DateOnly) {
		t.Errorf("ArrowLeft from %s focused %q", pick, f)
	}
	key, months1 := kb.PageUp, -1
	if readMonth(t, ctx).PrevOff { // today's month: the next one is within the horizon
		key, months1 = kb.PageDown, 1
	}
	other := time.Date(left.Year(), left.Month()+time.Month(months1), 1, 0, 0, 0, 0, time.UTC)
	want1 := other.AddDate(0, 0, min(left.Day(), other.AddDate(0, 1, -1).Day())-1)
	run(t, ctx, "page up or down", chromedp.KeyEvent(key), settled())
	if f, v := focused(), readMonth(t, ctx); f != want1.Format(time.DateOnly) || v.Title != dateTitle(want1) {
		t.Errorf("Page key from %s focused %q in %s, want %s", left.Format(time.DateOnly), f, v.Title, want1.Format(time.DateOnly))
	}

	// One query a month (each within the budget), one a chosen day.
	var monthQueries, dayQueries int
	for _, q := range availabilityQueries(t, ctx) {
		span := q[1].Sub(q[0])
		switch {
		case span <= 25*time.Hour:
			dayQueries++
		case span <= 32*24*time.Hour && int(span/time.Hour) <= 3000:
			monthQueries++
		default:
			t.Errorf("availability query %v..%v", q[0], q[1])
		}
	}
	if monthQueries != len(months) || dayQueries != 2 {
		t.Errorf("%d month queries for %d months, %d day queries for 2 days chosen", monthQueries, len(months), dayQueries)
	}
}

// dateTitle is the month view's title of day's month (en-US).
func dateTitle(day time.Time) string { return day.Format("January 2006") }

// TestBookingPageNothingFree: a calendar with no free time before its
// horizon (closed every day, open only on a day past the horizon) says so
// on the page, lists no times and marks no day, within the default cost
// budget of a publishable key (2 tokens a second, burst 40): the search
// asks for each month up to the horizon once, and no further.
func TestBookingPageNothingFree(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = pageKeyring(t)
		c.PageRateLimit, c.PageRateBurst = 2, 40 // bookline serve's defaults
	}})
	awayFromEdges(t, time.UTC, 0) // the message names the horizon's last day
	now := time.Now().UTC()
	const horizon = 60
	closedWeek := map[string]any{}
	for _, wd := range []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"} {
		closedWeek[wd] = []any{}
	}
	beyond := now.AddDate(0, 0, horizon+3)
	// No slot step: the page uses availability's 15-minute grid, so the
	// months up to the horizon cost about 60 tokens, more than a bucket.
	h.putCalendar("clinic", map[string]any{"name": "Dr. Weber", "timezone": "UTC", "allowed_durations_minutes": []int{30},
		"weekly_hours": closedWeek, "horizon_days": horizon,
		"date_overrides": []map[string]any{{"date": localDate(beyond, time.UTC), "hours": []map[string]string{{"start": "09:00", "end": "12:00"}}}}})
	ctx := newVisitor(t, newBrowser(t), "UTC")
	recordFetches(t, ctx)
	run(t, ctx, "open the page", chromedp.Navigate(h.openURL("clinic")),
		chromedp.WaitVisible(chromedp.CSS(".bl-none")), settled())
	none, live := textOf(t, ctx, ".bl-none"), textOf(t, ctx, ".bl-live")
	lastDay := now.Add(horizon * 24 * time.Hour)
	if !strings.HasPrefix(none, "No free times from today to ") || !strings.Contains(none, lastDay.Format("January")) || live != none {
		t.Errorf("message %q, live region %q", none, live)
	}
	hidden := get(t, ctx, "the day's times", chromedp.Evaluate[bool](`document.querySelector('.bl-times').hidden && document.querySelectorAll('.bl-slot').length === 0`))
	if !hidden {
		t.Errorf("times are shown although nothing is free:\n%s", pageText(ctx))
	}
	if alert := get(t, ctx, "alert", chromedp.Evaluate[bool](`!document.querySelector('.bl-alert').hidden`)); alert {
		t.Errorf("an error is shown: %s", textOf(t, ctx, ".bl-alert"))
	}
	queries := availabilityQueries(t, ctx)
	months := 0
	for v := readMonth(t, ctx); ; v = readMonth(t, ctx) {
		months++
		checkMonth(t, v, nil)
		if v.NextOff {
			if !slices.Contains(v.Days, localDate(lastDay, time.UTC)) {
				t.Errorf("the last month %s does not hold the horizon's day %s", v.Title, localDate(lastDay, time.UTC))
			}
			break
		}
		run(t, ctx, "next month", chromedp.Click(chromedp.CSS(".bl-next")), settled())
	}
	if len(queries) != months {
		t.Errorf("%d availability queries for %d months: %v", len(queries), months, queries)
	}
	for _, q := range queries {
		if q[1].Sub(q[0]) > 31*24*time.Hour+time.Hour || q[1].After(lastDay.AddDate(0, 0, 1)) {
			t.Errorf("availability query %v..%v: more than a month, or past the horizon", q[0], q[1])
		}
	}
}
