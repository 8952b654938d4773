package actor

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
)

// Runtime assertions on the writer's invariants. decideInterval decides
// whether an interval may be taken and ExtendApplied records what a batch
// applied; these check, in the same transaction and after the writes, what
// the index now says, with code of their own. A violation is a bug (or a
// damaged index), never bad input: in a test binary it panics at once, in
// production apply returns an *InvariantError, so the transaction is rolled
// back (nothing of it is committed) and the partition's writer stops for
// good (queue: a loud log, the partition not served, a metric).

// The invariants asserted (InvariantError.Invariant, and the metric's
// label).
const (
	// InvariantAppliedSeq: a batch advances the partition's applied
	// sequence to its last decided message, above the one before, and its
	// hash chain by exactly one link per decided message.
	InvariantAppliedSeq = "applied_sequence"
	// InvariantSlotOverlap: an interval decided on a calendar of
	// capacity 1 overlaps no other live slot entry (nor, with buffers, any
	// other buffered span), and no interval overlaps external busy time.
	InvariantSlotOverlap = "slot_overlap"
	// InvariantCapacity: at no instant of an interval decided on a
	// calendar of capacity above 1 do more live slot entries (or buffered
	// spans) overlap than its capacity.
	InvariantCapacity = "capacity"
)

// Invariants lists the invariants asserted, in a fixed order.
var Invariants = []string{InvariantAppliedSeq, InvariantSlotOverlap, InvariantCapacity}

// InvariantError says that applying a command (or a batch) would have
// broken one of the writer's invariants. Its transaction must be rolled
// back, and the partition must not go on: deciding the same messages again
// breaks it again.
type InvariantError struct {
	Partition int
	Seq       uint64 // stream sequence of the command (the batch's last, for InvariantAppliedSeq)
	Invariant string // InvariantAppliedSeq, InvariantSlotOverlap or InvariantCapacity
	Detail    string
}

func (e *InvariantError) Error() string {
	return fmt.Sprintf("INVARIANT VIOLATED (%s): partition %d, stream seq %d: %s; nothing of the batch was committed",
		e.Invariant, e.Partition, e.Seq, e.Detail)
}

// AsInvariantError returns the *InvariantError in err's chain, if any.
func AsInvariantError(err error) (*InvariantError, bool) {
	var e *InvariantError
	ok := errors.As(err, &e)
	return e, ok
}

// panicOnViolation makes a violation panic instead of returning an error.
// It is on in test binaries (testing.Testing), so that no test can pass
// over a broken invariant whatever the code between apply and the test
// does with the error; a test of the production behaviour turns it off
// with PanicOnViolation.
var panicOnViolation atomic.Bool

func init() { panicOnViolation.Store(testing.Testing()) }

// PanicOnViolation sets whether a broken invariant panics (on by default
// in test binaries, off in production) and returns the previous setting.
func PanicOnViolation(on bool) (was bool) { return panicOnViolation.Swap(on) }

// violated is the error (or, in tests, the panic) of a broken invariant.
func violated(e *InvariantError) error {
	if panicOnViolation.Load() {
		panic(e)
	}
	return e
}

// appliedState is a partition's applied sequence and chain length
// (data.Tx.AppliedCount) before a batch.
type appliedState struct {
	seq, count uint64
	chained    bool
}

func readApplied(tx *data.Tx, partition int) appliedState {
	var a appliedState
	a.seq, a.count, a.chained = tx.AppliedCount(partition)
	return a
}

// extendApplied records the batch's links (data.Tx.ExtendApplied), last
// being the last one's sequence, and asserts that they advanced the
// partition from before by exactly those messages (checkApplied).
func extendApplied(tx *data.Tx, partition int, before appliedState, last uint64, links []data.Link) error {
	if err := tx.ExtendApplied(partition, links); err != nil {
		return err
	}
	return checkApplied(tx, partition, before.seq, before.count, before.chained, last, len(links))
}

// checkApplied asserts that ExtendApplied advanced partition's applied
// sequence to last and its chain by exactly links messages, from seq0 and
// count0 (chained0: the partition had a chain) read before the batch.
func checkApplied(tx *data.Tx, partition int, seq0, count0 uint64, chained0 bool, last uint64, links int) error {
	seq, count, chained := tx.AppliedCount(partition)
	want := uint64(links)
	if chained0 {
		want += count0
	}
	if links == 0 {
		if seq == seq0 && count == count0 && chained == chained0 {
			return nil
		}
	} else if chained && seq == last && last > seq0 && count == want {
		return nil
	}
	return violated(&InvariantError{Partition: partition, Seq: last, Invariant: InvariantAppliedSeq,
		Detail: fmt.Sprintf("the batch decided %d messages, the last at seq %d, after seq %d (chain of %d, chained %t); the index now says seq %d, chain of %d (chained %t), want seq %d, chain of %d",
			links, last, seq0, count0, chained0, seq, count, chained, max(last, seq0), want)})
}

// checkTaken asserts, after bk was written for an interval decideInterval
// accepted at now, that the slot index is within the calendar's capacity
// over it: bk's own entry and at most seats-1 other live entries overlap at
// any instant of its interval, likewise for the buffered spans over its
// buffered span, and no external busy time overlaps it.
//
// Capacity 1 (nearly every calendar) needs no sweep: any other entry
// overlapping is a violation, and the scan allocates nothing.
func checkTaken(tx *data.Tx, partition int, d *Decoded, cal *data.Calendar, bk *data.Booking) error {
	return checkTakenBeside(tx, partition, d, cal, bk, "")
}

// checkTakenBeside is checkTaken leaving out the entry of booking beside
// (when not ""): a collective's part, which may overlap its own pending
// move, bk, and nothing else (collective_move.go).
func checkTakenBeside(tx *data.Tx, partition int, d *Decoded, cal *data.Calendar, bk *data.Booking, beside string) error {
	iv := data.Interval{Start: bk.Start, End: bk.End}
	buffered := data.Interval{Start: bk.Start.Add(-bk.BufferBefore), End: bk.End.Add(bk.BufferAfter)}
	seats := cal.Rules.Seats()
	now := d.At
	var (
		self, raw, buf int // entries: bk's own, other raw overlaps, other buffered overlaps
		others         []data.Interval
		othersBuf      []data.Interval
	)
	scan := tx.SlotTimesNear // ids cost an allocation each; read them only when one is left out
	if beside != "" {
		scan = tx.SlotsNear
	}
	scan(bk.CalendarID, buffered.Start, buffered.End, func(s data.SlotEntry) bool {
		if !s.LiveAt(now) || beside != "" && s.ID == beside {
			return true
		}
		if self == 0 && s.Start.Equal(bk.Start) && s.End.Equal(bk.End) && s.Hold == (bk.Status == data.StatusHeld) {
			self++ // one entry with bk's times is its own (ids are not read)
			return true
		}
		si := s.Interval()
		if si.Overlaps(iv) {
			raw++
			if seats > 1 {
				others = append(others, si)
			}
		}
		if sb := s.Buffered(); sb.Overlaps(buffered) {
			buf++
			if seats > 1 {
				othersBuf = append(othersBuf, sb)
			}
		}
		return true
	})
	fail := func(inv, format string, args ...any) error {
		return violated(&InvariantError{Partition: partition, Seq: d.Seq, Invariant: inv,
			Detail: fmt.Sprintf("calendar %q, booking %s [%s, %s): ", bk.CalendarID, bk.ID,
				bk.Start.Format(time.RFC3339Nano), bk.End.Format(time.RFC3339Nano)) + fmt.Sprintf(format, args...)})
	}
	if self == 0 {
		return fail(InvariantSlotOverlap, "the decided interval has no live slot entry")
	}
	if _, busy, ok := tx.FirstBusy(bk.CalendarID, iv); ok {
		return fail(InvariantSlotOverlap, "it overlaps external busy time [%s, %s)",
			busy.Start.Format(time.RFC3339Nano), busy.End.Format(time.RFC3339Nano))
	}
	if seats == 1 {
		if raw > 0 {
			return fail(InvariantSlotOverlap, "%d other live slot entries overlap it", raw)
		}
		if buf > 0 {
			return fail(InvariantSlotOverlap, "%d other live buffered spans overlap its buffered span", buf)
		}
		return nil
	}
	if n := 1 + peakOverlap(others, iv); n > seats {
		return fail(InvariantCapacity, "%d live slot entries overlap at one instant, capacity %d", n, seats)
	}
	if n := 1 + peakOverlap(othersBuf, buffered); n > seats {
		return fail(InvariantCapacity, "%d live buffered spans overlap at one instant, capacity %d", n, seats)
	}
	return nil
}

// peakOverlap is the largest number of ivs that share an instant inside w
// (half-open: touching intervals share none). It walks the clipped starts
// and ends in order, each sorted on its own; an end at an instant is taken
// before a start at it.
func peakOverlap(ivs []data.Interval, w data.Interval) int {
	if len(ivs) == 0 {
		return 0
	}
	starts := make([]int64, 0, len(ivs))
	ends := make([]int64, 0, len(ivs))
	for _, iv := range ivs {
		s, e := max(iv.Start.UnixNano(), w.Start.UnixNano()), min(iv.End.UnixNano(), w.End.UnixNano())
		if s < e {
			starts, ends = append(starts, s), append(ends, e)
		}
	}
	slices.Sort(starts)
	slices.Sort(ends)
	n, peak, j := 0, 0, 0
	for _, s := range starts {
		for j < len(ends) && ends[j] <= s {
			n--
			j++
		}
		n++
		peak = max(peak, n)
	}
	return peak
}
