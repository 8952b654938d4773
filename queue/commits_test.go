package queue_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestCollectiveCommitsEventsPerPart: a collective.commits decided by a
// node's writer publishes one outcome event per part it committed, each
// on its calendar's subject, shaped as that part's collective.commit
// answer, under its own Nats-Msg-Id and Bookline-Event-Part; the
// command itself has none.
func TestCollectiveCommitsEventsPerPart(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	defer stopNode(t, n)
	ids, entries, r := commitTwoCollectives(t, n)
	tok := actor.CommitsToken(0, n.PartitionCount())
	for _, c := range ids {
		var commits []string
		queuetest.CheckFor(t, 10*time.Second, func() error {
			commits = commits[:0]
			for _, m := range eventsOf(t, n.JetStream(), c) {
				var ev actor.Reply
				if err := json.Unmarshal(m.Data(), &ev); err != nil {
					return err
				}
				if ev.Type != actor.TypeCollectiveCommit {
					continue
				}
				h := m.Headers()
				if h.Get(queue.HeaderCommandSeq) != strconv.FormatUint(r.Seq, 10) || ev.Seq != r.Seq || ev.CalendarID != c ||
					ev.Booking == nil || ev.Booking.Status != "confirmed" || ev.RequestID != actor.CommitRequestID(ev.Booking.ID) {
					return fmt.Errorf("event %s with headers %v", m.Data(), h)
				}
				commits = append(commits, h.Get(queue.HeaderEventPart)+" "+h.Get("Nats-Msg-Id")+" "+ev.Booking.ID)
			}
			if len(commits) != 2 {
				return fmt.Errorf("%s: %d commit events, want 2", c, len(commits))
			}
			return nil
		})
		for _, line := range commits {
			var part int
			var id, booking string
			if _, err := fmt.Sscan(line, &part, &id, &booking); err != nil {
				t.Fatal(err)
			}
			if e := entries[part-1]; e.CalendarID != c || e.ID != booking || id[len(id)-len(strconv.Itoa(part))-1:] != "."+strconv.Itoa(part) {
				t.Fatalf("%s: event %q is not that of entry %d (%+v)", c, line, part, e)
			}
		}
	}
	if evs := eventsOf(t, n.JetStream(), tok); len(evs) != 0 {
		t.Fatalf("the batch itself has %d events", len(evs))
	}
}

// commitTwoCollectives prepares two collective bookings of two calendars
// of partition 0 (ids, sorted) and commits their four parts (entries)
// with one collective.commits, whose answer is r.
func commitTwoCollectives(t *testing.T, n *queue.Node) (ids []string, entries []actor.CommitEntry, r actor.Reply) {
	t.Helper()
	parts := n.PartitionCount()
	var a, b string // two calendars of partition 0
	for i := 0; b == ""; i++ {
		c := fmt.Sprint("cm", i)
		switch {
		case actor.PartitionOf(c, parts) != 0:
		case a == "":
			a = c
		default:
			b = c
		}
	}
	ids = []string{a, b}
	slices.Sort(ids)
	for _, c := range ids {
		submit(t, n, upsert(c))
	}
	for i, req := range []string{"k1", "k2"} {
		start := t0.Add(time.Duration(i) * time.Hour)
		for _, c := range ids {
			if r := submit(t, n, *actor.PrepareCommand(c, req, ids, actor.BookingSpec{Start: start, End: start.Add(time.Hour), Customer: "Team"}, 0)); r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("prepare: %+v", r)
			}
			entries = append(entries, actor.CommitEntry{CalendarID: c, ID: actor.CollectiveID(ids, req), CalendarIDs: ids})
		}
	}
	r = submit(t, n, *actor.CommitsCommand(actor.CommitsToken(0, parts), "batch-1", entries, 0))
	if r.Outcome != actor.OutcomeAccepted || len(r.Details) != 0 {
		t.Fatalf("batch: %+v", r)
	}
	return ids, entries, r
}
