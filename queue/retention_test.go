package queue_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestRecordRetentionLiveEqualsReplay: with real stream timestamps, request
// records with a retention go once the log time passes their expiry, in the
// live writers and in a replay alike (equal digests, also for a replay that
// stops before the expiry), and the hold expirer's own commands carry the
// internal retention.
func TestRecordRetentionLiveEqualsReplay(t *testing.T) {
	n := startNodeWith(t, queue.NodeConfig{DataDir: t.TempDir(), InternalRecordRetention: time.Second, HoldExpiryInterval: 50 * time.Millisecond}, nil)
	submit(t, n, upsert("a"))
	short := book("a", "r.short", 0, 1)
	short.RecordTTLSeconds = 1
	submit(t, n, short)
	submit(t, n, book("a", "kept", 4, 1))
	hold := book("a", "h1", 8, 1)
	hold.Type, hold.Booking.TTLSeconds = actor.TypeHoldCreate, 1
	held := submit(t, n, hold)
	if held.Outcome != actor.OutcomeAccepted {
		t.Fatalf("hold: %+v", held)
	}
	mid := digestOf(t, n.Store())
	var midSeq uint64
	for _, s := range mid.Applied {
		midSeq = max(midSeq, s)
	}

	// Log time moves only with commands: keep sending some (they expire
	// too) until the short record, the hold and the expirer's record of
	// the hold's expiry are gone.
	tick := 0
	queuetest.CheckFor(t, 30*time.Second, func() error {
		tick++
		c := actor.Command{Type: actor.TypeBookingCancel, RequestID: fmt.Sprintf("tick-%d", tick), CalendarID: "a",
			BookingID: actor.BookingID("a", "none"), RecordTTLSeconds: 1}
		submit(t, n, c)
		return n.Store().View(func(tx *data.Tx) error {
			if _, ok, _ := tx.Request("a", "r.short"); ok {
				return fmt.Errorf("r.short is still recorded")
			}
			if bk, err := tx.Booking("a", held.Booking.ID); err != nil || bk.Status != data.StatusExpired {
				return fmt.Errorf("hold: %s, %v", bk.Status, err)
			}
			return tx.ForEachRequest("a", func(req string, rec data.RequestRecord) error {
				if strings.HasPrefix(req, "expire.") {
					return fmt.Errorf("%s is still recorded (expires %s)", req, rec.Expires)
				}
				return nil
			})
		})
	})
	_ = n.Store().View(func(tx *data.Tx) error {
		if rec, ok, _ := tx.Request("a", "kept"); !ok || !rec.Expires.IsZero() {
			t.Errorf("a record without retention: %+v, %v", rec, ok)
		}
		return nil
	})
	live := digestOf(t, n.Store())
	if got := replayInto(t, n.JetStream(), queue.ReplayOptions{}); got.Total != live.Total {
		cal, _ := data.FirstDifference(live, got)
		t.Fatalf("replay differs from live index, first at calendar %q", cal)
	}
	if got := replayInto(t, n.JetStream(), queue.ReplayOptions{ToSeq: midSeq}); got.Total != mid.Total {
		cal, _ := data.FirstDifference(mid, got)
		t.Fatalf("--to-seq %d differs from the index at that point, first at %q", midSeq, cal)
	}
}
