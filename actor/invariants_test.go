package actor_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// The index remembers, per calendar, the longest buffered span it ever
// indexed, and a scan for the slots near an interval looks back that far
// (data.Tx.SlotsNear). An index whose record of it is damaged (set to 0)
// hides from the decision a booking that starts before the new interval and
// overlaps it; the writer's assertion, run after the write has recorded the
// new booking's own span, sees it. These tests damage it behind the store's
// back and check that the booking is refused by the assertion: a panic in
// a test binary, in production an *actor.InvariantError and no commit.

// indexWithShortSpan makes an index at path with calendar "cal" (capacity
// seats) and bookings of 10:00-11:00 on it, one per seat, then records
// that calendar's longest span as 0.
func indexWithShortSpan(t *testing.T, path string, seats int) *data.Store {
	t.Helper()
	s, err := data.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{tb: t, s: s}
	upsert := fmt.Sprintf(`{"v":1,"type":"calendar.upsert","request_id":"u","calendar_id":"cal","calendar":{"name":"n","timezone":"UTC","capacity":%d}}`, seats)
	if _, r := h.send("cal", upsert); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("upsert: %+v", r)
	}
	for i := range seats {
		if _, r := h.send("cal", bookCmd("cal", fmt.Sprintf("b%d", i), at(60), at(120), "c")); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("booking %d: %+v", i, r)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("span")).Put([]byte("cal"), binary.BigEndian.AppendUint64(nil, 0))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if s, err = data.Open(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// overlapping is a booking of 10:30-11:30 on "cal" at stream seq 100.
func overlapping() actor.Decoded {
	return decodeNoSkips(actor.Input{Seq: 100, At: t0.Add(100 * 1e9), SubjectCalendar: "cal",
		Data: []byte(bookCmd("cal", "late", at(90), at(150), "c"))})
}

func TestInvariantOverlapStopsInProduction(t *testing.T) {
	for _, tc := range []struct {
		seats int
		want  string
	}{{1, actor.InvariantSlotOverlap}, {2, actor.InvariantCapacity}} {
		t.Run(tc.want, func(t *testing.T) {
			s := indexWithShortSpan(t, filepath.Join(t.TempDir(), "index.db"), tc.seats)
			defer actor.PanicOnViolation(actor.PanicOnViolation(false))
			var applied0 uint64
			if err := s.View(func(tx *data.Tx) error { applied0 = tx.AppliedSeq(0); return nil }); err != nil {
				t.Fatal(err)
			}
			err := s.Commit(func(tx *data.Tx) error {
				_, err := actor.Apply(tx, 0, []actor.Decoded{overlapping()})
				return err
			})
			e, ok := actor.AsInvariantError(err)
			if !ok {
				t.Fatalf("apply of an overlapping booking: err %v, want an *actor.InvariantError", err)
			}
			if e.Invariant != tc.want || e.Partition != 0 || e.Seq != 100 {
				t.Fatalf("violation %+v, want invariant %s at partition 0 seq 100", e, tc.want)
			}
			// Rolled back: no booking, the applied sequence as it was.
			err = s.View(func(tx *data.Tx) error {
				if tx.BookingExists("cal", actor.BookingID("cal", "late")) {
					t.Error("the booking that broke the invariant was committed")
				}
				if got := tx.AppliedSeq(0); got != applied0 {
					t.Errorf("applied seq %d after the violation, want %d", got, applied0)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestInvariantOverlapPanicsInTests(t *testing.T) {
	for _, tc := range []struct {
		seats int
		want  string
	}{{1, actor.InvariantSlotOverlap}, {2, actor.InvariantCapacity}} {
		t.Run(tc.want, func(t *testing.T) {
			s := indexWithShortSpan(t, filepath.Join(t.TempDir(), "index.db"), tc.seats)
			var got any
			err := s.Commit(func(tx *data.Tx) (err error) {
				defer func() {
					if got = recover(); got != nil {
						err = fmt.Errorf("panicked: %v", got)
					}
				}()
				_, err = actor.Apply(tx, 0, []actor.Decoded{overlapping()})
				return err
			})
			e, ok := got.(*actor.InvariantError)
			if !ok {
				t.Fatalf("apply of an overlapping booking in a test binary: recovered %v (err %v), want a panic with an *actor.InvariantError", got, err)
			}
			if e.Invariant != tc.want {
				t.Fatalf("violation %+v, want %s", e, tc.want)
			}
		})
	}
}
