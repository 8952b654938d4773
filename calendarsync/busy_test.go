package calendarsync_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/api/calendar/v3"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/calendarsync/googletest"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue/queuetest"
)

// liveBlocks returns cal's live busy blocks by start.
func liveBlocks(t testing.TB, n node, cal string) []data.Interval {
	t.Helper()
	var out []data.Interval
	if err := n.Store().View(func(tx *data.Tx) error {
		return tx.ForEachBusySlot(cal, func(_ string, iv data.Interval) error { out = append(out, iv); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func syncBusy(t testing.TB, n node, cal string) data.BusySyncResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := n.SyncGoogle(ctx, cal)
	if err != nil {
		t.Fatalf("sync %s: %v", cal, err)
	}
	return res
}

func upsert(t testing.TB, n node, cal string, spec actor.CalendarSpec) {
	t.Helper()
	if spec.Name == "" {
		spec.Name = cal
	}
	r := submit(t, n, &actor.Command{Type: actor.TypeCalendarUpsert, CalendarID: cal, Calendar: &spec})
	if r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("upsert %s: %+v", cal, r)
	}
}

func dt(t time.Time) *calendar.EventDateTime {
	return &calendar.EventDateTime{DateTime: t.UTC().Format(time.RFC3339)}
}

func waitDrained(t testing.TB, n node, cal string) {
	t.Helper()
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if p := pending(t, n, cal); p > 0 {
			return fmt.Errorf("%d pending", p)
		}
		return nil
	})
}

// TestTwoCalendarsOnOneGoogleCalendar: a "30-min" and a "60-min" calendar
// of one person, both linked with busy sync to the same Google calendar:
// a booking on one is busy time for the other, and never for itself.
func TestTwoCalendarsOnOneGoogleCalendar(t *testing.T) {
	fake := googletest.New(t)
	const g = "person@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	link(t, n, "short", g, true)
	link(t, n, "long", g, true)
	s, e := slot(5)
	if r := book(t, n, "short", s, e); r.Outcome != actor.OutcomeAccepted {
		t.Fatal(r)
	}
	waitDrained(t, n, "short")
	if res := syncBusy(t, n, "long"); res.Set != 1 {
		t.Fatalf("long: %+v", res)
	}
	if r := book(t, n, "long", s, e.Add(time.Hour)); r.Code != actor.CodeExternalBusy {
		t.Fatalf("a booking of the other calendar must block: %+v", r)
	}
	if res := syncBusy(t, n, "short"); res.Set != 0 || len(liveBlocks(t, n, "short")) != 0 {
		t.Fatalf("a calendar's own mirror must not block it: %+v", res)
	}
}

// TestAllDayEventsInTheGoogleCalendarsZone: an all-day event is the day of
// the Google calendar's zone (Events.timeZone), not of the bookline
// calendar.
func TestAllDayEventsInTheGoogleCalendarsZone(t *testing.T) {
	fake := googletest.New(t)
	const g = "la@example.com"
	fake.AddCalendar(g)
	fake.SetTimeZone(g, "America/Los_Angeles")
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	upsert(t, n, "la", actor.CalendarSpec{Timezone: "UTC", Link: &data.ExternalLink{CalendarID: g, SyncBusy: true}})
	day := day0.Add(24 * time.Hour)
	fake.PutEvent(g, calendar.Event{Summary: "out of office", EventType: "outOfOffice",
		Start: &calendar.EventDateTime{Date: day.Format(time.DateOnly)}, End: &calendar.EventDateTime{Date: day.Add(24 * time.Hour).Format(time.DateOnly)}})
	syncBusy(t, n, "la")
	la, _ := time.LoadLocation("America/Los_Angeles")
	want := data.Interval{Start: time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, la).UTC()}
	want.End = time.Date(day.Year(), day.Month(), day.Day()+1, 0, 0, 0, 0, la).UTC()
	got := liveBlocks(t, n, "la")
	if len(got) != 1 || !got[0].Start.Equal(want.Start) || !got[0].End.Equal(want.End) {
		t.Fatalf("blocks %v, want %v", got, want)
	}
	// The LA morning of that day (16:00 UTC on a UTC calendar's next day
	// boundary side) is busy.
	morning := want.Start.Add(9 * time.Hour)
	if r := book(t, n, "la", morning, morning.Add(time.Hour)); r.Code != actor.CodeExternalBusy {
		t.Fatalf("LA morning of the all-day event: %+v", r)
	}
}

// TestBuffersApplyAroundBusyTime: the calendar's buffers keep bookings
// away from Google events as from other bookings.
func TestBuffersApplyAroundBusyTime(t *testing.T) {
	fake := googletest.New(t)
	const g = "buf@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	upsert(t, n, "buf", actor.CalendarSpec{Timezone: "UTC", Rules: data.Rules{BufferBeforeMinutes: 15, BufferAfterMinutes: 10},
		Link: &data.ExternalLink{CalendarID: g, SyncBusy: true}})
	s, e := slot(10)
	fake.PutEvent(g, calendar.Event{Summary: "meeting", Start: dt(s), End: dt(e)})
	syncBusy(t, n, "buf")
	if r := book(t, n, "buf", e, e.Add(30*time.Minute)); r.Code != actor.CodeExternalBusy {
		t.Fatalf("a booking right after the event (buffer before 15m): %+v", r)
	}
	if r := book(t, n, "buf", s.Add(-35*time.Minute), s.Add(-5*time.Minute)); r.Code != actor.CodeExternalBusy {
		t.Fatalf("a booking ending 5m before the event (buffer after 10m): %+v", r)
	}
	if r := book(t, n, "buf", e.Add(15*time.Minute), e.Add(45*time.Minute)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("a booking whose buffers clear the event: %+v", r)
	}
}

// TestLongEventClippedToTheReadWindow: a leave that began more than a year
// ago and goes on blocks what is left of it.
func TestLongEventClippedToTheReadWindow(t *testing.T) {
	fake := googletest.New(t)
	const g = "leave@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	link(t, n, "leave", g, true)
	fake.PutEvent(g, calendar.Event{Summary: "parental leave", Start: dt(day0.Add(-400 * 24 * time.Hour)), End: dt(day0.Add(30 * 24 * time.Hour))})
	syncBusy(t, n, "leave")
	s, e := slot(3)
	if r := book(t, n, "leave", s, e); r.Code != actor.CodeExternalBusy {
		t.Fatalf("booking during an ongoing leave: %+v", r)
	}
	s, e = slot(31 * 24)
	if r := book(t, n, "leave", s, e); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("booking after the leave: %+v", r)
	}
}

// TestBusyPolicyPerEventKind: which events block, one case each, and
// recurring events as their instances (exceptions included) through full
// and incremental reads.
func TestBusyPolicyPerEventKind(t *testing.T) {
	fake := googletest.New(t)
	const g = "kinds@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	link(t, n, "kinds", g, true)
	me := &calendar.EventAttendee{Email: g}
	other := &calendar.EventAttendee{Email: "boss@example.com", ResponseStatus: "accepted"}
	answered := func(status string) []*calendar.EventAttendee {
		a := *me
		a.ResponseStatus = status
		return []*calendar.EventAttendee{other, &a}
	}
	cases := []struct {
		name string
		ev   calendar.Event
		busy bool
	}{
		{"plain", calendar.Event{}, true},
		{"tentative event", calendar.Event{Status: "tentative"}, true},
		{"accepted", calendar.Event{Attendees: answered("accepted")}, true},
		{"tentative answer", calendar.Event{Attendees: answered("tentative")}, true},
		{"not answered", calendar.Event{Attendees: answered("needsAction")}, true},
		{"declined", calendar.Event{Attendees: answered("declined")}, false},
		{"someone else declined", calendar.Event{Attendees: []*calendar.EventAttendee{{Email: "x@example.com", ResponseStatus: "declined"}, {Email: g, ResponseStatus: "accepted"}}}, true},
		{"transparent", calendar.Event{Transparency: "transparent"}, false},
		{"out of office", calendar.Event{EventType: "outOfOffice", Transparency: "transparent"}, true},
		{"focus time", calendar.Event{EventType: "focusTime"}, true},
		{"working location", calendar.Event{EventType: "workingLocation"}, false},
		{"birthday", calendar.Event{EventType: "birthday", Transparency: "transparent"}, false},
	}
	for i, c := range cases {
		s, e := slot(2 * i)
		ev := c.ev
		ev.Summary, ev.Start, ev.End = c.name, dt(s), dt(e)
		fake.PutEvent(g, ev)
	}
	// A daily series of 3, its second instance cancelled.
	rs, re := slot(100)
	series := fake.PutEvent(g, calendar.Event{Summary: "standup", Start: dt(rs), End: dt(re), Recurrence: []string{"RRULE:FREQ=DAILY;COUNT=3"}})
	second := rs.Add(24 * time.Hour)
	fake.PutEvent(g, calendar.Event{Id: series + "_" + second.Format("20060102T150405Z"), RecurringEventId: series, Status: "cancelled",
		OriginalStartTime: dt(second), Start: dt(second), End: dt(second.Add(time.Hour))})
	syncBusy(t, n, "kinds")
	for i, c := range cases {
		s, e := slot(2 * i)
		r := book(t, n, "kinds", s, e)
		if got := r.Code == actor.CodeExternalBusy; got != c.busy {
			t.Errorf("%s: busy %v, want %v (%+v)", c.name, got, c.busy, r)
		} else if !got && r.Outcome == actor.OutcomeAccepted {
			submit(t, n, &actor.Command{Type: actor.TypeBookingCancel, CalendarID: "kinds", BookingID: r.Booking.ID})
		}
	}
	for k, want := range []bool{true, false, true} {
		s := rs.Add(time.Duration(k) * 24 * time.Hour)
		r := book(t, n, "kinds", s, s.Add(time.Hour))
		if got := r.Code == actor.CodeExternalBusy; got != want {
			t.Errorf("standup instance %d: busy %v, want %v", k, got, want)
		}
	}
	// The series deleted: incremental sync shows only ids of cancelled
	// instances, and they clear their blocks.
	fake.DeleteEvent(g, series)
	if res := syncBusy(t, n, "kinds"); res.Full || res.Cleared != 2 {
		t.Fatalf("after deleting the series: %+v", res)
	}
}

// TestShortPagesAreFollowed: Google may return fewer items than
// maxResults per page; every page is read.
func TestShortPagesAreFollowed(t *testing.T) {
	fake := googletest.New(t)
	const g = "pages@example.com"
	fake.AddCalendar(g)
	fake.SetPageCap(3)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	link(t, n, "pages", g, true)
	for i := range 10 {
		s, e := slot(i * 2)
		fake.PutEvent(g, calendar.Event{Start: dt(s), End: dt(e)})
	}
	if res := syncBusy(t, n, "pages"); res.Set != 10 || res.Events != 10 {
		t.Fatalf("%+v", res)
	}
	_ = calendarsync.BlockPrefix
}
