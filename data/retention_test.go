package data_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

func TestPruneRequests(t *testing.T) {
	s := datatest.MustOpen(t)
	putCalendar(t, s, "a", "b")
	rec := func(seq int, exp time.Time) data.RequestRecord {
		return data.RequestRecord{Fingerprint: "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f", Seq: uint64(seq), Reply: data.BinaryReply(`{}`), Expires: exp}
	}
	mustCommit(t, s, func(tx *data.Tx) error {
		for i := range 6 {
			// a/e0..e5 expire at minutes 0..5, in partition 0.
			if err := tx.PutExpiringRequest(0, "a", fmt.Sprintf("e%d", i), rec(i, at(i))); err != nil {
				return err
			}
		}
		// b is in partition 1: partition 0 never touches it.
		if err := tx.PutExpiringRequest(1, "b", "e0", rec(9, at(0))); err != nil {
			return err
		}
		return tx.PutRequest("a", "forever", rec(10, time.Time{}))
	})
	mustView(t, s, func(tx *data.Tx) error {
		got, ok, err := tx.Request("a", "e3")
		if !ok || err != nil || !got.Expires.Equal(at(3)) || got.Seq != 3 || got.Fingerprint != "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f" {
			t.Errorf("expiring record read back as %+v, %v, %v", got, ok, err)
		}
		return nil
	})
	present := func(cal, req string) (ok bool) {
		mustView(t, s, func(tx *data.Tx) error { _, ok, _ = tx.Request(cal, req); return nil })
		return ok
	}
	prune := func(p int, now time.Time, max int) (n int) {
		mustCommit(t, s, func(tx *data.Tx) (err error) { n, err = tx.PruneRequests(p, now, max); return err })
		return n
	}
	if n := prune(0, at(0).Add(-time.Nanosecond), 10); n != 0 || !present("a", "e0") {
		t.Fatalf("pruned %d before any expiry", n)
	}
	// At minute 4, e0..e4 are due; two per call.
	if n := prune(0, at(4), 2); n != 2 || present("a", "e1") || !present("a", "e2") {
		t.Fatalf("first call pruned %d", n)
	}
	// A record replaced after its expiry leaves its entry behind; the
	// entry goes, the new record stays.
	mustCommit(t, s, func(tx *data.Tx) error { return tx.PutExpiringRequest(0, "a", "e2", rec(20, at(100))) })
	if n := prune(0, at(4), 10); n != 3 || !present("a", "e2") || present("a", "e4") || !present("a", "e5") {
		t.Fatalf("second call pruned %d; e2 %v e4 %v e5 %v", n, present("a", "e2"), present("a", "e4"), present("a", "e5"))
	}
	if !present("b", "e0") || !present("a", "forever") {
		t.Fatal("pruned another partition's record, or one kept forever")
	}
	// Several calls in one transaction see what the earlier ones and the
	// puts between them did.
	mustCommit(t, s, func(tx *data.Tx) error {
		step := func(want int) error {
			if n, err := tx.PruneRequests(0, at(5), 10); err != nil || n != want {
				return fmt.Errorf("pruned %d, want %d: %v", n, want, err)
			}
			return nil
		}
		if err := step(1); err != nil { // e5
			return err
		}
		if err := tx.PutExpiringRequest(0, "a", "late", rec(30, at(5))); err != nil {
			return err
		}
		if err := step(1); err != nil { // late
			return err
		}
		return step(0)
	})
	if present("a", "e5") || present("a", "late") || !present("a", "e2") {
		t.Fatal("records after the pruning transaction")
	}
	// ResetPartition drops the partition's entries with its calendars.
	mustCommit(t, s, func(tx *data.Tx) error {
		return tx.ResetPartition(1, func(cal string) bool { return cal == "b" })
	})
	mustView(t, s, func(tx *data.Tx) error {
		return tx.ForEachRequestExpiry(func(e data.RequestExpiry) error {
			if e.Partition == 1 || e.Calendar == "b" {
				t.Errorf("entry %+v survived the reset", e)
			}
			return nil
		})
	})
}
