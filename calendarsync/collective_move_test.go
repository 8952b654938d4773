package calendarsync_test

import (
	"testing"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/calendarsync/googletest"
	"github.com/bookline/bookline/data"
)

// TestCollectiveMoveMirroredOnEachMember: a collective's move changes
// each member's Google event when the member commits the move (not while
// it is pending: the move record is never mirrored), keeping the event's
// id.
func TestCollectiveMoveMirroredOnEachMember(t *testing.T) {
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
		submit(t, n, actor.PrepareCommand(cal, "panel", ids, actor.BookingSpec{Start: s, End: e, Customer: "Pat"}, 0))
	}
	submit(t, n, actor.DecideCommand(id, ids, actor.DecisionCommit))
	for _, cal := range ids {
		submit(t, n, actor.ApplyCommand(cal, id, ids, true, nil))
	}
	// eventAt checks that cal's Google calendar has the collective's
	// event at [from, to) (compareMirror: every confirmed booking has its
	// event at its interval, nothing else has one).
	eventAt := func(cal string, from, to int) {
		t.Helper()
		waitDrained(t, n, cal)
		if confirmed := compareMirror(t, n, fake, cal, gs[cal]); confirmed != 1 {
			t.Fatalf("%s: %d confirmed events, want the collective's part", cal, confirmed)
		}
		ev, ok := fake.Events(gs[cal])[id]
		fs, _ := slot(from)
		_, te := slot(to - 1)
		if es, ee, _ := googletest.Interval(&ev); !ok || !es.Equal(fs) || !ee.Equal(te) {
			t.Fatalf("%s: the collective's event %v is [%s, %s), want [%s, %s)", cal, ok, es, ee, fs, te)
		}
	}
	for _, cal := range ids {
		eventAt(cal, 3, 4)
	}
	ns, ne := slot(5)
	move := actor.MoveID(id, "later")
	for _, cal := range ids {
		if r := submit(t, n, actor.MovePrepareCommand(cal, "later", id, ids, actor.IntervalSpec{Start: ns, End: ne}, 0)); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("move on %s: %+v", cal, r)
		}
	}
	for _, cal := range ids {
		eventAt(cal, 3, 4) // pending: the event stays
	}
	submit(t, n, actor.DecideCommand(move, ids, actor.DecisionCommit))
	for _, cal := range ids {
		if r := submit(t, n, actor.MoveApplyCommand(cal, id, move, ids, true, nil)); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("move commit on %s: %+v", cal, r)
		}
	}
	for _, cal := range ids {
		eventAt(cal, 5, 6)
	}
}

// TestLinkWhileMovePendingMirrorsThePart: a calendar linked while a
// collective's move is pending on it gets the part's event, never one for
// the move record (nor for a part still pending); the move, once
// committed, moves the event.
func TestLinkWhileMovePendingMirrorsThePart(t *testing.T) {
	fake := googletest.New(t)
	const g = "doc@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	ids := []string{"doc", "room"}
	for _, cal := range ids {
		upsert(t, n, cal, actor.CalendarSpec{Timezone: "UTC"})
	}
	s, e := slot(3)
	id := actor.CollectiveID(ids, "panel")
	for _, cal := range ids {
		submit(t, n, actor.PrepareCommand(cal, "panel", ids, actor.BookingSpec{Start: s, End: e, Customer: "Pat"}, 0))
	}
	submit(t, n, actor.DecideCommand(id, ids, actor.DecisionCommit))
	for _, cal := range ids {
		submit(t, n, actor.ApplyCommand(cal, id, ids, true, nil))
	}
	ns, ne := slot(5)
	move := actor.MoveID(id, "later")
	for _, cal := range ids {
		submit(t, n, actor.MovePrepareCommand(cal, "later", id, ids, actor.IntervalSpec{Start: ns, End: ne}, 0))
	}
	// A second collective, still pending on doc.
	ps, pe := slot(8)
	submit(t, n, actor.PrepareCommand("doc", "other", ids, actor.BookingSpec{Start: ps, End: pe, Customer: "Kim"}, 0))

	upsert(t, n, "doc", actor.CalendarSpec{Timezone: "UTC", Link: &data.ExternalLink{CalendarID: g}})
	waitDrained(t, n, "doc")
	if confirmed := compareMirror(t, n, fake, "doc", g); confirmed != 1 || len(fake.Events(g)) != 1 {
		t.Fatalf("%d confirmed, events %v: want the part's alone", confirmed, fake.Events(g))
	}
	submit(t, n, actor.DecideCommand(move, ids, actor.DecisionCommit))
	for _, cal := range ids {
		submit(t, n, actor.MoveApplyCommand(cal, id, move, ids, true, nil))
	}
	waitDrained(t, n, "doc")
	compareMirror(t, n, fake, "doc", g)
	ev := fake.Events(g)[id]
	if es, _, _ := googletest.Interval(&ev); !es.Equal(ns) {
		t.Fatalf("the part's event starts at %s, want %s", es, ns)
	}
}
