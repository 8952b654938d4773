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

func apart(t *testing.T, parts, n int) []string {
	t.Helper()
	return queuetest.Apart(t, queue.PartitionOf, "m", parts, n)
}

// TestCollectiveResolvedAfterAPICrash: an API that stops after some steps
// of a collective leaves parts pending; the partitions' owner brings every
// member to the one recorded decision: abort when nothing was decided,
// commit when a commit was recorded (whether or not some member applied
// it). A replay of the log gives the same index.
func TestCollectiveResolvedAfterAPICrash(t *testing.T) {
	n := startNodeWith(t, queue.NodeConfig{DataDir: t.TempDir(), HoldExpiryInterval: 50 * time.Millisecond,
		CollectiveResolveAfter: 300 * time.Millisecond}, nil)
	ids := apart(t, 4, 3)
	for _, id := range ids {
		submit(t, n, upsert(id))
	}
	spec := func(slot int) actor.BookingSpec {
		s := t0.Add(time.Duration(slot) * time.Hour)
		return actor.BookingSpec{Start: s, End: s.Add(time.Hour), Customer: "Panel"}
	}
	prepare := func(req string, slot int, members []string) string {
		for _, cal := range members {
			if r := submit(t, n, *actor.PrepareCommand(cal, req, ids, spec(slot), 0)); r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("prepare %s on %s: %+v", req, cal, r)
			}
		}
		return actor.CollectiveID(ids, req)
	}
	status := func(cal, id string) string {
		var bk data.Booking
		_ = n.View(func(tx *data.Tx) (err error) { bk, err = tx.Booking(cal, id); return err })
		return bk.Status
	}
	waitAll := func(id, want string, members []string) {
		t.Helper()
		queuetest.CheckFor(t, 20*time.Second, func() error {
			for _, cal := range members {
				if got := status(cal, id); got != want {
					return fmt.Errorf("%s: part %s is %q, want %q", cal, id, got, want)
				}
			}
			return nil
		})
	}

	// Stopped after the prepares (one member's never came): aborted, and
	// the intervals are free again.
	aborted := prepare("k1", 1, ids[:2])
	waitAll(aborted, data.StatusAborted, ids[:2])
	for _, cal := range ids {
		if r := submit(t, n, book(cal, "after-k1-"+cal, 4, 4)); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("the aborted collective's interval on %s: %+v", cal, r)
		}
	}
	// The missing prepare arrives late: refused, nothing left pending.
	if r := submit(t, n, *actor.PrepareCommand(ids[2], "k1", ids, spec(1), 0)); r.Code != actor.CodeSlotTaken && r.Code != actor.CodeCollectiveAborted {
		t.Fatalf("late prepare: %+v", r)
	}

	// Stopped after the decision: committed on every member.
	committed := prepare("k2", 3, ids)
	if r := submit(t, n, *actor.DecideCommand(committed, ids, actor.DecisionCommit)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("decide: %+v", r)
	}
	waitAll(committed, data.StatusConfirmed, ids)

	// Stopped after one member applied the commit.
	partial := prepare("k3", 5, ids)
	submit(t, n, *actor.DecideCommand(partial, ids, actor.DecisionCommit))
	submit(t, n, *actor.ApplyCommand(ids[1], partial, ids, true, nil))
	waitAll(partial, data.StatusConfirmed, ids)

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
