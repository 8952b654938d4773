package queue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestCollectiveMoveResolvedAfterAPICrash: an API that stops after some
// steps of a collective's move leaves move records pending (each member
// holding the old and the new interval); the partitions' owner brings
// every member to the move's one recorded decision: abort when nothing was
// decided (the parts stay, the new interval is free again), commit when a
// commit was recorded (every part moves, whether or not some member
// applied it). A replay of the log gives the same index.
func TestCollectiveMoveResolvedAfterAPICrash(t *testing.T) {
	n := startNodeWith(t, queue.NodeConfig{DataDir: t.TempDir(), HoldExpiryInterval: 50 * time.Millisecond,
		CollectiveResolveAfter: 300 * time.Millisecond}, nil)
	ids := apart(t, 4, 3)
	for _, id := range ids {
		submit(t, n, upsert(id))
	}
	hour := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	// committed books the collective of req at hour h on every member.
	committed := func(req string, h int) string {
		id := actor.CollectiveID(ids, req)
		for _, cal := range ids {
			submit(t, n, *actor.PrepareCommand(cal, req, ids, actor.BookingSpec{Start: hour(h), End: hour(h + 1), Customer: "Panel"}, 0))
		}
		submit(t, n, *actor.DecideCommand(id, ids, actor.DecisionCommit))
		for _, cal := range ids {
			if r := submit(t, n, *actor.ApplyCommand(cal, id, ids, true, nil)); r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("commit of %s on %s: %+v", req, cal, r)
			}
		}
		return id
	}
	// prepare sends the move of part to hour h to members, under req.
	prepare := func(part, req string, h int, members []string) string {
		for _, cal := range members {
			r := submit(t, n, *actor.MovePrepareCommand(cal, req, part, ids, actor.IntervalSpec{Start: hour(h), End: hour(h + 1)}, 0))
			if r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("move %s on %s: %+v", req, cal, r)
			}
		}
		return actor.MoveID(part, req)
	}
	read := func(cal, id string) data.Booking {
		var bk data.Booking
		_ = n.View(func(tx *data.Tx) (err error) { bk, err = tx.Booking(cal, id); return err })
		return bk
	}
	// waitAll waits for the part to be at hour h and its move record in
	// status want, on members.
	waitAll := func(part, move string, h int, want string, members []string) {
		t.Helper()
		queuetest.CheckFor(t, 20*time.Second, func() error {
			for _, cal := range members {
				p, m := read(cal, part), read(cal, move)
				if m.Status != want || p.MoveID != "" || !p.Start.Equal(hour(h)) || p.Status != data.StatusConfirmed {
					return fmt.Errorf("%s: move %s is %q (want %q), part %s at %s (want %s), moving %q",
						cal, move, m.Status, want, p.Status, p.Start, hour(h), p.MoveID)
				}
			}
			return nil
		})
	}

	// Stopped after two of three prepares: aborted, the parts stay, and
	// the new interval is free again.
	p1 := committed("k1", 1)
	m1 := prepare(p1, "m1", 2, ids[:2])
	waitAll(p1, m1, 1, data.StatusAborted, ids[:2])
	for _, cal := range ids {
		if r := submit(t, n, book(cal, "after-m1-"+cal, 8, 4)); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("the aborted move's interval on %s: %+v", cal, r)
		}
	}
	// The missing prepare arrives late: refused, nothing left pending.
	if r := submit(t, n, *actor.MovePrepareCommand(ids[2], "m1", p1, ids, actor.IntervalSpec{Start: hour(2), End: hour(3)}, 0)); r.Outcome == actor.OutcomeAccepted {
		t.Fatalf("late move prepare: %+v", r)
	}

	// Stopped after the decision: moved on every member.
	p2 := committed("k2", 3)
	m2 := prepare(p2, "m2", 4, ids)
	if r := submit(t, n, *actor.DecideCommand(m2, ids, actor.DecisionCommit)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("decide: %+v", r)
	}
	waitAll(p2, m2, 4, data.StatusMoved, ids)

	// Stopped after one member applied the commit.
	p3 := committed("k3", 5)
	m3 := prepare(p3, "m3", 6, ids)
	submit(t, n, *actor.DecideCommand(m3, ids, actor.DecisionCommit))
	submit(t, n, *actor.MoveApplyCommand(ids[1], p3, m3, ids, true, nil))
	waitAll(p3, m3, 6, data.StatusMoved, ids)

	var pending []data.PendingPart
	_ = n.View(func(tx *data.Tx) error {
		pending = tx.PendingBefore(time.Now().Add(time.Hour), 100, func(string) bool { return true })
		return nil
	})
	if len(pending) != 0 {
		t.Fatalf("left pending: %+v", pending)
	}
	live := digestOf(t, n.Store())
	if got := replayInto(t, n.JetStream(), queue.ReplayOptions{}); got.Total != live.Total {
		cal, _ := data.FirstDifference(live, got)
		t.Fatalf("replay differs from the live index, first at calendar %q", cal)
	}
}
