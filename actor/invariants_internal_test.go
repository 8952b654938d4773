package actor

import (
	"fmt"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// checkApplied against crafted states: the batch's claims (what it
// decided) are set apart from what the index says.
func TestCheckAppliedCraftedStates(t *testing.T) {
	s := datatest.MustOpen(t)
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	batch := make([]Decoded, 3)
	for i := range batch {
		body := fmt.Sprintf(`{"v":1,"type":"calendar.upsert","request_id":"u%d","calendar_id":"cal","calendar":{"name":"n","timezone":"UTC"}}`, i)
		batch[i] = Decode(Input{Seq: uint64(10 + 5*i), At: t0, SubjectCalendar: "cal", Data: []byte(body)})
	}
	if err := s.Commit(func(tx *data.Tx) error { _, err := Apply(tx, 3, batch); return err }); err != nil {
		t.Fatal(err)
	}
	defer PanicOnViolation(PanicOnViolation(false))
	err := s.View(func(tx *data.Tx) error {
		seq, count, chained := tx.AppliedCount(3)
		if seq != 20 || count != 3 || !chained {
			t.Fatalf("after 3 messages up to seq 20: seq %d, chain of %d, chained %t", seq, count, chained)
		}
		for _, c := range []struct {
			name         string
			seq0, count0 uint64
			chained0     bool
			last         uint64
			links        int
			want         bool
		}{
			{"as applied, a new chain", 0, 0, false, 20, 3, false},
			{"three links on a chain of 7 make 10, not 3", 0, 7, true, 20, 3, true},
			{"one message fewer than chained", 5, 1, true, 20, 3, true},
			{"a message more than chained", 0, 0, false, 20, 4, true},
			{"another last sequence", 0, 0, false, 25, 3, true},
			{"no advance over the sequence before", 20, 0, false, 20, 3, true},
			{"nothing decided, nothing changed", 20, 3, true, 20, 0, false},
			{"nothing decided, yet the chain moved", 20, 2, true, 20, 0, true},
		} {
			err := checkApplied(tx, 3, c.seq0, c.count0, c.chained0, c.last, c.links)
			e, ok := AsInvariantError(err)
			if ok != c.want || (ok && (e.Invariant != InvariantAppliedSeq || e.Partition != 3)) {
				t.Errorf("%s: err %v, want a violation: %t", c.name, err, c.want)
			}
		}
		// In a test binary the same violation panics.
		PanicOnViolation(true)
		defer PanicOnViolation(false)
		defer func() {
			if e, ok := recover().(*InvariantError); !ok || e.Invariant != InvariantAppliedSeq {
				t.Errorf("recovered %v, want a panic with an *InvariantError of %s", e, InvariantAppliedSeq)
			}
		}()
		_ = checkApplied(tx, 3, 0, 0, false, 20, 4)
		t.Error("checkApplied of a crafted state did not panic in test mode")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPeakOverlap(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	iv := func(a, b int) data.Interval {
		return data.Interval{Start: t0.Add(time.Duration(a) * time.Minute), End: t0.Add(time.Duration(b) * time.Minute)}
	}
	w := iv(0, 60)
	for _, c := range []struct {
		ivs  []data.Interval
		want int
	}{
		{nil, 0},
		{[]data.Interval{iv(-30, 0), iv(60, 90)}, 0}, // touching the window only
		{[]data.Interval{iv(0, 30), iv(30, 60)}, 1},  // touching each other
		{[]data.Interval{iv(0, 31), iv(30, 60)}, 2},
		{[]data.Interval{iv(-10, 70), iv(10, 20), iv(15, 25), iv(19, 40)}, 4},
		{[]data.Interval{iv(10, 20), iv(20, 30), iv(25, 35), iv(50, 80)}, 2},
	} {
		if got := peakOverlap(c.ivs, w); got != c.want {
			t.Errorf("peakOverlap(%v) = %d, want %d", c.ivs, got, c.want)
		}
		// The same as the decision's own sweep.
		if got := maxCoverage(c.ivs, w); got != c.want {
			t.Errorf("maxCoverage(%v) = %d, want %d", c.ivs, got, c.want)
		}
	}
}

// BenchmarkCheckTaken measures the slot assertion after a booking.create
// on a calendar of capacity 1 with a day of half-hour bookings around it
// (the entries a scan near the new one walks), and, for scale, the
// decision's own check of the same interval (decideInterval). cpu-ns/op
// is the process's CPU time per check, which other load on the machine
// disturbs less than the wall clock.
func BenchmarkCheckTaken(b *testing.B) {
	s := datatest.MustOpen(b)
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	cal := data.Calendar{ID: "cal", Timezone: "UTC", CreatedAt: t0, UpdatedAt: t0}
	bk := data.Booking{ID: "new", CalendarID: "cal", Start: t0.Add(12 * time.Hour), End: t0.Add(12*time.Hour + 30*time.Minute),
		Status: data.StatusConfirmed, CreatedAt: t0}
	err := s.Commit(func(tx *data.Tx) error {
		if err := tx.PutCalendar(cal); err != nil {
			return err
		}
		for i := range 48 {
			if i == 24 {
				continue // the new booking's slot
			}
			start := t0.Add(time.Duration(i) * 30 * time.Minute)
			if err := tx.PutBooking(data.Booking{ID: fmt.Sprintf("b%02d", i), CalendarID: "cal", Start: start, End: start.Add(30 * time.Minute),
				Status: data.StatusConfirmed, CreatedAt: t0}); err != nil {
				return err
			}
		}
		return tx.PutBooking(bk)
	})
	if err != nil {
		b.Fatal(err)
	}
	d := &Decoded{Seq: 1, At: t0}
	loc := time.UTC
	iv := data.Interval{Start: bk.Start, End: bk.End}
	for _, bc := range []struct {
		name string
		fn   func(tx *data.Tx) error
	}{
		{"checkTaken", func(tx *data.Tx) error { return checkTaken(tx, 0, d, &cal, &bk) }},
		{"decideInterval", func(tx *data.Tx) error {
			if v := decideInterval(tx, &cal, loc, iv, t0, "new"); v.code != "" {
				return fmt.Errorf("refused: %s", v.code)
			}
			return nil
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var cpu0 time.Duration
			n := 0
			err := s.View(func(tx *data.Tx) error {
				b.ReportAllocs()
				cpu0 = processCPU()
				for b.Loop() {
					n++
					if err := bc.fn(tx); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(n), "cpu-ns/op")
		})
	}
}
