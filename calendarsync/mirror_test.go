package calendarsync_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/calendar/v3"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/calendarsync/googletest"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue/queuetest"
)

func status(n node, cal, g string) data.LinkStatus {
	return n.GoogleStatus(cal, &data.ExternalLink{CalendarID: g})
}

func waitStatus(t testing.TB, n node, cal, g string, ok func(data.LinkStatus) bool) data.LinkStatus {
	t.Helper()
	var st data.LinkStatus
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if st = status(n, cal, g); !ok(st) {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	return st
}

// TestDeleteOnAMissingCalendarIsNotDone: Google answers 404 for a missing
// event and for a missing calendar; only the first completes a delete.
func TestDeleteOnAMissingCalendarIsNotDone(t *testing.T) {
	fake := googletest.New(t)
	const g = "gone@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	link(t, n, "gone", g, false)
	s, e := slot(1)
	r := book(t, n, "gone", s, e)
	waitDrained(t, n, "gone")
	fake.RemoveCalendar(g)
	submit(t, n, &actor.Command{Type: actor.TypeBookingCancel, CalendarID: "gone", BookingID: r.Booking.ID})
	waitStatus(t, n, "gone", g, func(st data.LinkStatus) bool {
		return st.Status == calendarsync.StatusDegraded && strings.HasPrefix(st.Reason, calendarsync.ReasonCalendarNotFound) && st.Pending == 1
	})
	// The calendar back (access restored): the delete goes through.
	fake.AddCalendar(g)
	n.google.Wake("gone")
	waitStatus(t, n, "gone", g, func(st data.LinkStatus) bool { return st.Status == calendarsync.StatusOK && st.Pending == 0 })
}

// TestOneBadEntryIsSetAside: an insert answered 409 whose event is not
// there, and a change of an event its owner deleted (403), are retried a
// few times, then set aside as dead letters; the calendar's other
// operations go on, the link stays ok, and an admin can retry or drop them.
func TestOneBadEntryIsSetAside(t *testing.T) {
	fake := googletest.New(t)
	const g = "bad@example.com"
	fake.AddCalendar(g)
	gc := fastRetries(fake.Service)
	gc.EntryAttempts = 3
	n := startNode(t, t.TempDir(), gc)
	defer stopNode(t, n)
	link(t, n, "bad", g, false)
	for range 3 {
		fake.Inject("POST", googletest.Conflict)
	}
	s, e := slot(1)
	first := book(t, n, "bad", s, e)
	s2, e2 := slot(3)
	second := book(t, n, "bad", s2, e2)
	st := waitStatus(t, n, "bad", g, func(st data.LinkStatus) bool { return st.DeadLetters == 1 && st.Pending == 0 })
	if st.Status != calendarsync.StatusOK {
		t.Fatalf("one bad entry must not degrade the link: %+v", st)
	}
	if ev, ok := fake.Events(g)[second.Booking.ID]; !ok || ev.Status != "confirmed" {
		t.Fatalf("the next booking was not mirrored: %v", ok)
	}
	dl, err := n.google.DeadLetters("bad", 10)
	if err != nil || len(dl) != 1 || dl[0].Entry.Booking.ID != first.Booking.ID || !strings.Contains(dl[0].Reason, "duplicate") {
		t.Fatalf("dead letters %+v %v", dl, err)
	}
	if err := n.google.RetryDeadLetter("bad", dl[0].Entry.Seq, dl[0].Entry.Sub); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, n, "bad", g, func(st data.LinkStatus) bool { return st.DeadLetters == 0 && st.Pending == 0 })
	compareMirror(t, n, fake, "bad", g)

	// Deleted by its owner in Google, then the booking moves: 403.
	fake.DeleteEvent(g, second.Booking.ID)
	s3, e3 := slot(5)
	if r := submit(t, n, &actor.Command{Type: actor.TypeBookingReschedule, CalendarID: "bad", BookingID: second.Booking.ID,
		Reschedule: &actor.IntervalSpec{Start: s3, End: e3}}); r.Outcome != actor.OutcomeAccepted {
		t.Fatal(r)
	}
	s4, e4 := slot(7)
	third := book(t, n, "bad", s4, e4)
	st = waitStatus(t, n, "bad", g, func(st data.LinkStatus) bool { return st.DeadLetters == 1 && st.Pending == 0 })
	if st.Status != calendarsync.StatusOK {
		t.Fatalf("a 403 on one deleted event must not degrade the link: %+v", st)
	}
	if _, ok := fake.Events(g)[third.Booking.ID]; !ok {
		t.Fatal("the booking after the refused change was not mirrored")
	}
	dl, _ = n.google.DeadLetters("bad", 10)
	if err := n.google.DropDeadLetter("bad", dl[0].Entry.Seq, dl[0].Entry.Sub); err != nil {
		t.Fatal(err)
	}
	if err := n.google.DropDeadLetter("bad", dl[0].Entry.Seq, dl[0].Entry.Sub); err != calendarsync.ErrNoDeadLetter {
		t.Fatalf("second drop: %v", err)
	}
	if st := status(n, "bad", g); st.DeadLetters != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestQuotaExceededThrottles: quotaExceeded is a usage limit: the sync
// waits (Retry-After), shows "throttled", and does not call it forbidden.
func TestQuotaExceededThrottles(t *testing.T) {
	fake := googletest.New(t)
	const g = "quota@example.com"
	fake.AddCalendar(g)
	gc := fastRetries(fake.Service)
	gc.QuotaPauseBase, gc.QuotaPauseMax = 50*time.Millisecond, 100*time.Millisecond
	gc.RequestsPerMinute = 0 // the default
	reasons := make(chan string, 100)
	gc.OnFailure = func(r string) { reasons <- r }
	n := startNode(t, t.TempDir(), gc)
	defer stopNode(t, n)
	link(t, n, "quota", g, false)
	f := googletest.QuotaExceeded
	f.RetryAfter = 2
	fake.Inject("POST", f)
	s, e := slot(1)
	book(t, n, "quota", s, e)
	st := waitStatus(t, n, "quota", g, func(st data.LinkStatus) bool { return st.Status == calendarsync.StatusThrottled })
	if !strings.HasPrefix(st.Reason, calendarsync.ReasonQuotaExceeded) || st.ThrottledUntil == nil || st.Pending != 1 {
		t.Fatalf("status %+v", st)
	}
	waitStatus(t, n, "quota", g, func(st data.LinkStatus) bool { return st.Status == calendarsync.StatusOK && st.Pending == 0 })
	if r := <-reasons; r != calendarsync.ReasonQuotaExceeded {
		t.Fatalf("reason %q", r)
	}
	if got := n.google.RateLimit(); got <= 0 || got > 10 {
		t.Fatalf("rate limit %v/s: must stay under Google's 600/min", got)
	}
}

// TestUnlinkClearsBusyTimeAndCancelsQueuedOperations: after an unlink the
// busy blocks are cleared through the log and queued operations never
// reach the old Google calendar; events already there stay.
func TestUnlinkClearsBusyTimeAndCancelsQueuedOperations(t *testing.T) {
	fake := googletest.New(t)
	const g = "old@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	link(t, n, "un", g, true)
	s, e := slot(2)
	fake.PutEvent(g, calendar.Event{Summary: "busy", Start: dt(s), End: dt(e)})
	syncBusy(t, n, "un")
	if r := book(t, n, "un", s, e); r.Code != actor.CodeExternalBusy {
		t.Fatal(r)
	}
	s1, e1 := slot(4)
	kept := book(t, n, "un", s1, e1)
	waitDrained(t, n, "un")
	fake.SetDenyAll(&googletest.Unavailable)
	s2, e2 := slot(6)
	book(t, n, "un", s2, e2)
	if pending(t, n, "un") != 1 {
		t.Fatal("expected a queued operation")
	}
	_, writes, _ := fake.Stats()
	upsert(t, n, "un", actor.CalendarSpec{Timezone: "UTC"})
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if b := liveBlocks(t, n, "un"); len(b) > 0 || pending(t, n, "un") > 0 {
			return fmt.Errorf("blocks %v, pending %d", b, pending(t, n, "un"))
		}
		return nil
	})
	fake.SetDenyAll(nil)
	if r := book(t, n, "un", s, e); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("booking after unlink: %+v", r)
	}
	if _, w, _ := fake.Stats(); w != writes {
		t.Fatalf("%d writes to the old calendar after the unlink", w-writes)
	}
	if ev := fake.Events(g)[kept.Booking.ID]; ev.Status != "confirmed" {
		t.Fatalf("the event already mirrored must stay: %+v", ev)
	}

	// sync_busy turned off clears the blocks too.
	link(t, n, "off", g, true)
	syncBusy(t, n, "off")
	if len(liveBlocks(t, n, "off")) == 0 {
		t.Fatal("no block")
	}
	link(t, n, "off", g, false)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if b := liveBlocks(t, n, "off"); len(b) > 0 {
			return fmt.Errorf("blocks %v", b)
		}
		return nil
	})
}

// TestLinkBackfillsFutureBookings: linking a calendar that has bookings
// mirrors its confirmed bookings that have not ended, in start order.
func TestLinkBackfillsFutureBookings(t *testing.T) {
	fake := googletest.New(t)
	const g = "late@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	upsert(t, n, "late", actor.CalendarSpec{Timezone: "UTC"})
	var ids []string
	for _, i := range []int{9, 3, 6} {
		s, e := slot(i)
		ids = append(ids, book(t, n, "late", s, e).Booking.ID)
	}
	submit(t, n, &actor.Command{Type: actor.TypeBookingCancel, CalendarID: "late", BookingID: ids[2]})
	var queued []data.SyncEntry
	upsert(t, n, "late", actor.CalendarSpec{Timezone: "UTC", Link: &data.ExternalLink{CalendarID: g}})
	_ = n.Store().View(func(tx *data.Tx) (err error) { queued, err = tx.PendingSync("late", 10); return err })
	if len(queued) > 0 && (len(queued) != 2 || queued[0].Booking.ID != ids[1] || queued[1].Booking.ID != ids[0]) {
		t.Fatalf("backfill order %+v", queued)
	}
	waitDrained(t, n, "late")
	evs := fake.Events(g)
	if len(evs) != 2 || evs[ids[0]].Status != "confirmed" || evs[ids[1]].Status != "confirmed" {
		t.Fatalf("events %v", evs)
	}
	compareMirror(t, n, fake, "late", g)
}

// TestEventPrivacy: mirrored events are private and titled neutrally by
// default; a link may choose its title template and visibility.
func TestEventPrivacy(t *testing.T) {
	fake := googletest.New(t)
	const g = "priv@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	link(t, n, "priv", g, false)
	s, e := slot(1)
	a := book(t, n, "priv", s, e)
	upsert(t, n, "tmpl", actor.CalendarSpec{Timezone: "UTC", Link: &data.ExternalLink{CalendarID: g, EventTitle: "Call with {customer}", Visibility: "default"}})
	b := book(t, n, "tmpl", s, e)
	waitDrained(t, n, "priv")
	waitDrained(t, n, "tmpl")
	evs := fake.Events(g)
	if ev := evs[a.Booking.ID]; ev.Summary != calendarsync.DefaultEventTitle || ev.Visibility != "private" || strings.Contains(ev.Description, "customer") {
		t.Fatalf("default event %+v", ev)
	}
	if ev := evs[b.Booking.ID]; ev.Summary != "Call with customer" || ev.Visibility != "default" {
		t.Fatalf("templated event %+v", ev)
	}
}

// TestUnlinkAfterRestartClearsBusyTime: a calendar whose busy time was
// read before a restart, and is unlinked after it, loses its blocks too.
func TestUnlinkAfterRestartClearsBusyTime(t *testing.T) {
	fake := googletest.New(t)
	const g = "restart@example.com"
	fake.AddCalendar(g)
	dir := t.TempDir()
	n := startNode(t, dir, fastRetries(fake.Service))
	link(t, n, "rs", g, true)
	s, e := slot(2)
	fake.PutEvent(g, calendar.Event{Summary: "busy", Start: dt(s), End: dt(e)})
	syncBusy(t, n, "rs")
	stopNode(t, n)
	n = startNode(t, dir, fastRetries(fake.Service))
	defer stopNode(t, n)
	// Whether the sweep at start runs before the unlink or after it,
	// the blocks go.
	upsert(t, n, "rs", actor.CalendarSpec{Timezone: "UTC"})
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if b := liveBlocks(t, n, "rs"); len(b) > 0 {
			return fmt.Errorf("blocks %v", b)
		}
		return nil
	})
}

// reschedule moves booking id of cal to slot i.
func reschedule(t testing.TB, n node, cal, id string, i int) {
	t.Helper()
	s, e := slot(i)
	if r := submit(t, n, &actor.Command{Type: actor.TypeBookingReschedule, CalendarID: cal, BookingID: id,
		Reschedule: &actor.IntervalSpec{Start: s, End: e}}); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("reschedule: %+v", r)
	}
}

// eventAt fails unless the event of booking id in Google is at slot i.
func eventAt(t testing.TB, fake *googletest.Server, g, id string, i int) {
	t.Helper()
	ev := fake.Events(g)[id]
	s, e, _ := googletest.Interval(&ev)
	ws, we := slot(i)
	if !s.Equal(ws) || !e.Equal(we) || ev.Status != "confirmed" {
		t.Fatalf("the event is [%s, %s) %s, want [%s, %s) confirmed", s, e, ev.Status, ws, we)
	}
}

// TestLatePatchCannotOverwriteANewerOne: the patch of a first reschedule
// times out here but Google applies it later, after the mirror retried it
// and after the patch of a second reschedule. It carries the etag the
// event had before the first, so Google refuses it (412) and the event
// stays where the second put it.
func TestLatePatchCannotOverwriteANewerOne(t *testing.T) {
	fake := googletest.New(t)
	const g = "late@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	link(t, n, "late", g, false)
	s, e := slot(1)
	id := book(t, n, "late", s, e).Booking.ID
	waitDrained(t, n, "late")

	// Far past the client's 300 ms: the retry and the second reschedule
	// are done long before.
	fake.Inject("PATCH", googletest.Fault{Late: 2 * time.Second})
	reschedule(t, n, "late", id, 3)
	reschedule(t, n, "late", id, 5)
	waitDrained(t, n, "late")
	if a, r, _ := fake.LateRequests(); a+r > 0 {
		t.Skip("the late patch landed before the mirror was done: this machine is too slow to order them")
	}
	eventAt(t, fake, g, id, 5)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if _, _, p := fake.LateRequests(); p > 0 {
			return fmt.Errorf("the late patch was not tried yet")
		}
		return nil
	})
	if a, r, _ := fake.LateRequests(); a != 0 || r != 1 {
		t.Errorf("late patch: %d applied, %d refused; want it refused", a, r)
	}
	eventAt(t, fake, g, id, 5)
	compareMirror(t, n, fake, "late", g)
	if st := status(n, "late", g); st.Status != calendarsync.StatusOK || st.DeadLetters != 0 {
		t.Fatalf("status %+v", st)
	}
}

// TestLatePatchBeforeTheRetry: Google applies the timed-out patch before
// the retry reads the event; the read shows the change is there, and the
// retry writes nothing.
func TestLatePatchBeforeTheRetry(t *testing.T) {
	fake := googletest.New(t)
	const g = "early@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	link(t, n, "early", g, false)
	s, e := slot(1)
	id := book(t, n, "early", s, e).Booking.ID
	waitDrained(t, n, "early")
	_, before, _ := fake.Stats()
	// Applied while the client still waits; the client is answered 503.
	fake.Inject("PATCH", googletest.Fault{Late: 50 * time.Millisecond})
	reschedule(t, n, "early", id, 3)
	waitDrained(t, n, "early")
	eventAt(t, fake, g, id, 3)
	if a, r, _ := fake.LateRequests(); a != 1 || r != 0 {
		t.Fatalf("late patch: %d applied, %d refused", a, r)
	}
	if _, w, _ := fake.Stats(); w-before != 1 {
		t.Fatalf("%d writes for one reschedule whose first patch was applied", w-before)
	}
	reschedule(t, n, "early", id, 5)
	waitDrained(t, n, "early")
	eventAt(t, fake, g, id, 5)
}

// TestPreconditionFailedReadsAgain: the event changed in Google since the
// mirror wrote it (a hand edit, another instance), so the next patch,
// conditional on the old etag, answers 412: the mirror reads the event
// again and patches it from there; it neither degrades the link nor sets
// the operation aside. When the event already is what the operation
// wants, nothing is written.
func TestPreconditionFailedReadsAgain(t *testing.T) {
	fake := googletest.New(t)
	const g = "edit@example.com"
	fake.AddCalendar(g)
	gc := fastRetries(fake.Service)
	gc.EntryAttempts = 2
	reasons := make(chan string, 1000)
	gc.OnFailure = func(r string) { reasons <- r }
	n := startNode(t, t.TempDir(), gc)
	defer stopNode(t, n)
	link(t, n, "edit", g, false)
	s, e := slot(1)
	bk := book(t, n, "edit", s, e).Booking
	waitDrained(t, n, "edit")
	preconditions := func() (k int) {
		for {
			select {
			case r := <-reasons:
				if r == calendarsync.ReasonPrecondition {
					k++
				}
			default:
				return k
			}
		}
	}

	// Moved and retitled by hand, then the booking moves: overwritten.
	ev := fake.Events(g)[bk.ID]
	hs, he := slot(2)
	ev.Summary, ev.Start, ev.End = "moved by hand", dt(hs), dt(he)
	fake.PutEvent(g, ev)
	reschedule(t, n, "edit", bk.ID, 3)
	waitDrained(t, n, "edit")
	eventAt(t, fake, g, bk.ID, 3)
	if got := fake.Events(g)[bk.ID].Summary; got != calendarsync.DefaultEventTitle {
		t.Fatalf("title %q", got)
	}
	if k := preconditions(); k != 1 {
		t.Fatalf("%d precondition failures, want 1", k)
	}

	// Changed in Google to exactly what the next operation wants (as a
	// late write of ours would): the 412 and the read, no write.
	moved := *bk
	moved.Start, moved.End = slot(5)
	want := *calendarsync.EventFor(&moved, &data.ExternalLink{CalendarID: g})
	fake.PutEvent(g, want)
	_, before, _ := fake.Stats()
	reschedule(t, n, "edit", bk.ID, 5)
	waitDrained(t, n, "edit")
	eventAt(t, fake, g, bk.ID, 5)
	if _, w, _ := fake.Stats(); w != before {
		t.Fatalf("%d writes to an event already right", w-before)
	}
	if k := preconditions(); k != 1 {
		t.Fatalf("%d precondition failures, want 1", k)
	}

	// 412 on every patch for a while: more than EntryAttempts rounds of
	// patch's own re-reads, still neither a dead letter nor degraded.
	for range 10 {
		fake.Inject("PATCH", googletest.Fault{Status: 412, Reason: "conditionNotMet"})
	}
	reschedule(t, n, "edit", bk.ID, 7)
	waitDrained(t, n, "edit")
	eventAt(t, fake, g, bk.ID, 7)
	if k := preconditions(); k != 10 {
		t.Fatalf("%d precondition failures, want 10", k)
	}
	if st := status(n, "edit", g); st.Status != calendarsync.StatusOK || st.DeadLetters != 0 || st.Failures[calendarsync.ReasonPrecondition] != 12 {
		t.Fatalf("status %+v", st)
	}
}

// TestSeriesMirroredEachOccurrence: every occurrence of a series is an
// event of its own in the linked calendar, and a cancel from an occurrence
// on deletes those events, through the real sync path.
func TestSeriesMirroredEachOccurrence(t *testing.T) {
	fake := googletest.New(t)
	const g = "series@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	upsert(t, n, "weekly", actor.CalendarSpec{Timezone: "Europe/Berlin", Link: &data.ExternalLink{CalendarID: g}})
	s, e := slot(2)
	r := submit(t, n, &actor.Command{Type: actor.TypeBookingCreate, CalendarID: "weekly",
		Booking: &actor.BookingSpec{Start: s, End: e, Customer: "Sam", Recurrence: &actor.RecurrenceSpec{Freq: actor.FreqWeekly, Count: 4}}})
	if r.Outcome != actor.OutcomeAccepted || len(r.Occurrences) != 4 {
		t.Fatalf("series: %+v", r)
	}
	waitDrained(t, n, "weekly")
	if evs := fake.Events(g); len(evs) != 4 {
		t.Fatalf("%d events for 4 occurrences: %v", len(evs), evs)
	}
	submit(t, n, &actor.Command{Type: actor.TypeBookingCancel, CalendarID: "weekly", BookingID: r.Occurrences[2].BookingID, Scope: actor.ScopeFollowing})
	waitDrained(t, n, "weekly")
	if confirmed := compareMirror(t, n, fake, "weekly", g); confirmed != 2 {
		t.Fatalf("%d confirmed events after cancelling the last two occurrences, want 2", confirmed)
	}
}

// TestCollectiveMirroredOnEachMember: a collective booking's part is
// mirrored to each member's linked Google calendar when the member commits
// it (not while it is pending), with the collective's id, and removed from
// each when the collective is cancelled.
func TestCollectiveMirroredOnEachMember(t *testing.T) {
	fake := googletest.New(t)
	gs := map[string]string{"doc": "doc@example.com", "room": "room@example.com"}
	for _, g := range gs {
		fake.AddCalendar(g)
	}
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	ids := []string{"doc", "room"}
	for _, cal := range ids {
		upsert(t, n, cal, actor.CalendarSpec{Timezone: "UTC", Link: &data.ExternalLink{CalendarID: gs[cal]}})
	}
	s, e := slot(3)
	id := actor.CollectiveID(ids, "panel")
	for _, cal := range ids {
		if r := submit(t, n, actor.PrepareCommand(cal, "panel", ids, actor.BookingSpec{Start: s, End: e, Customer: "Pat"}, 0)); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("prepare on %s: %+v", cal, r)
		}
	}
	for _, cal := range ids {
		waitDrained(t, n, cal)
		if evs := fake.Events(gs[cal]); len(evs) != 0 {
			t.Fatalf("%s mirrored a pending part: %v", cal, evs)
		}
	}
	submit(t, n, actor.DecideCommand(id, ids, actor.DecisionCommit))
	for _, cal := range ids {
		submit(t, n, actor.ApplyCommand(cal, id, ids, true, nil))
	}
	for _, cal := range ids {
		waitDrained(t, n, cal)
		if confirmed := compareMirror(t, n, fake, cal, gs[cal]); confirmed != 1 {
			t.Fatalf("%s: %d confirmed events, want the collective's part", cal, confirmed)
		}
	}
	for _, cal := range ids {
		submit(t, n, actor.CancelCommand(cal, "cancel-panel", id, ids, 0))
	}
	for _, cal := range ids {
		waitDrained(t, n, cal)
		if confirmed := compareMirror(t, n, fake, cal, gs[cal]); confirmed != 0 {
			t.Fatalf("%s: %d confirmed events after the cancel", cal, confirmed)
		}
	}
}
