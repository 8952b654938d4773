package queue_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// A partition whose next command breaks one of the writer's invariants
// stops, in production, with a loud log, the partition not served and
// the violation counted; the command is not committed. The index is
// damaged for it: its record of a calendar's longest booking (which the
// scans for nearby slots rely on) is set to 0, so the decision misses a
// booking that starts earlier and overlaps (see actor/invariants_test.go).
func TestInvariantViolationStopsThePartition(t *testing.T) {
	defer actor.PanicOnViolation(actor.PanicOnViolation(false))
	dir := t.TempDir()
	n := startNode(t, dir, nil)
	submit(t, n, upsert("inv"))
	if r := submit(t, n, book("inv", "first", 4, 4)); r.Outcome != actor.OutcomeAccepted { // 10:00-11:00
		t.Fatalf("first booking: %+v", r)
	}
	index := n.Store().Path()
	stopNode(t, n)
	db, err := bolt.Open(index, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("span")).Put([]byte("inv"), binary.BigEndian.AppendUint64(nil, 0))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	logs := &queuetest.SyncBuffer{}
	n = startNode(t, dir, logs)
	before := queue.InvariantViolations()[actor.InvariantSlotOverlap]
	cmd := book("inv", "second", 6, 4) // 10:30-11:30
	cmd.V = actor.SchemaVersion
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if raw, err := n.Submit(ctx, &cmd, cmd.Fingerprint()); err == nil {
		t.Fatalf("an overlapping booking on a damaged index was answered: %s", raw)
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if _, ok := actor.AsInvariantError(n.Ready()); !ok {
			return errors.New("the node does not report the violation: " + errString(n.Ready()))
		}
		return nil
	})
	if e, _ := actor.AsInvariantError(n.Ready()); e.Invariant != actor.InvariantSlotOverlap {
		t.Errorf("violation %+v, want %s", e, actor.InvariantSlotOverlap)
	}
	if got := queue.InvariantViolations()[actor.InvariantSlotOverlap]; got != before+1 {
		t.Errorf("violations counted %d, want %d", got, before+1)
	}
	if !strings.Contains(logs.String(), "INVARIANT VIOLATED") {
		t.Errorf("no INVARIANT VIOLATED in the log:\n%s", logs.String())
	}
	// Not committed, and the partition takes nothing more.
	err = n.Store().View(func(tx *data.Tx) error {
		if tx.BookingExists("inv", actor.BookingID("inv", "second")) {
			t.Error("the booking that broke the invariant was committed")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	again := book("inv", "third", 20, 1)
	again.V = actor.SchemaVersion
	if _, err := n.Submit(context.Background(), &again, again.Fingerprint()); !errors.Is(err, queue.ErrUnavailable) {
		t.Errorf("a command for the stopped partition: err %v, want %v", err, queue.ErrUnavailable)
	}
}

func errString(err error) string {
	if err == nil {
		return "ready"
	}
	return err.Error()
}
