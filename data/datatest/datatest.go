package datatest

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
)

// MustOpen opens a store in a fresh temporary directory. At the end of the
// test it checks the index invariants (CheckInvariants), then closes the
// store.
func MustOpen(tb testing.TB) *data.Store {
	tb.Helper()
	s, err := data.Open(filepath.Join(tb.TempDir(), "index.db"))
	if err != nil {
		tb.Fatalf("datatest: open store: %v", err)
	}
	tb.Cleanup(func() {
		CheckInvariants(tb, s)
		if err := s.Close(); err != nil {
			tb.Errorf("datatest: close store: %v", err)
		}
	})
	return s
}

// CheckInvariants fails tb if the index of s is inconsistent:
//
//   - bbolt's own check of the file (tx.Check) reports a problem;
//   - at some instant, more intervals that count than the calendar's
//     capacity (1 unless its rules say otherwise) overlap, or more buffered
//     spans than the capacity do (a buffer conflict). What counts is what
//     the writer counts: confirmed bookings, and holds that are live at the
//     calendar's latest log time found in the index (see logNow);
//   - a slot has no booking record, or its record is neither confirmed nor
//     held, or is a hold where the slot says booking (or the reverse), or
//     has other times, expiry or buffers than the slot;
//   - a confirmed or held record has no slot, or a booking has two;
//   - a held record is missing from the hold expiry index;
//   - a booking record belongs to another calendar than the one it is filed
//     under, or its interval is empty;
//   - a collective's part names a pending move (MoveID) that is not a
//     pending move record naming it back (MoveOf), or the reverse. A part
//     and its own pending move count as one booking where they overlap:
//     that is the only overlap allowed beyond the capacity;
//   - a live busy block has no busy slot, or a busy slot no live block;
//   - a request record that expires is missing from the request expiry
//     index (entries without their record are allowed: they are dropped
//     when due).
//
// Every calendar listed by Tx.CalendarIDs is checked. It reports every
// violation it finds (up to a limit per calendar), not only the first.
func CheckInvariants(tb testing.TB, s *data.Store) {
	tb.Helper()
	// bbolt's check reads the freelist, which a concurrent writer changes
	// (a data race, and pages freed after this snapshot look like
	// corruption): run it in a write transaction, rolled back, where no
	// other writer can run.
	var fileErr error
	err := s.Commit(func(tx *data.Tx) error {
		fileErr = tx.CheckFile()
		return errRollback
	})
	if fileErr != nil {
		tb.Errorf("datatest: bbolt check of the index file: %v", fileErr)
	}
	if err != nil && !errors.Is(err, errRollback) && !errors.Is(err, data.ErrClosed) {
		tb.Errorf("datatest: bbolt check of the index file: %v", err)
	}
	err = s.View(func(tx *data.Tx) error {
		CheckTx(tb, tx)
		return nil
	})
	if err != nil {
		tb.Errorf("datatest: invariants: read index: %v", err)
	}
}

var errRollback = errors.New("datatest: rolled back")

// CheckTx is CheckInvariants on the state seen by tx, which may be a
// read-write transaction that is still open (its own writes included),
// without bbolt's file check (which needs a committed state).
func CheckTx(tb testing.TB, tx *data.Tx) {
	tb.Helper()
	indexed := map[string]bool{} // calendar \x00 hold id \x00 expiry
	for _, h := range tx.DueHolds(time.Unix(0, math.MaxInt64), math.MaxInt32) {
		indexed[holdKey(h.Calendar, h.ID, h.Expires)] = true
	}
	for _, calID := range tx.CalendarIDs() {
		for _, p := range checkCalendar(tx, calID, indexed) {
			tb.Errorf("datatest: invariant violated: %s", p)
		}
	}
	for _, p := range checkRequestExpiry(tx) {
		tb.Errorf("datatest: invariant violated: %s", p)
	}
}

// checkRequestExpiry checks that every request record with an expiry, of
// every calendar and of every calendar the expiry index names, is in the
// index under that expiry.
func checkRequestExpiry(tx *data.Tx) []string {
	var problems []string
	entries := map[string]bool{}
	cals := map[string]bool{}
	for _, c := range tx.CalendarIDs() {
		cals[c] = true
	}
	created := map[string]bool{} // the same, by the id of the booking the request creates
	err := tx.ForEachRequestExpiry(func(e data.RequestExpiry) error {
		entries[holdKey(e.Calendar, e.Request, e.Expires)] = true
		created[holdKey(e.Calendar, data.BookingID(e.Calendar, e.Request), e.Expires)] = true
		cals[e.Calendar] = true
		return nil
	})
	if err != nil {
		return []string{fmt.Sprintf("request expiry index: %v", err)}
	}
	for _, cal := range slices.Sorted(maps.Keys(cals)) {
		err := tx.ForEachRequest(cal, func(req string, rec data.RequestRecord) error {
			if !rec.Expires.IsZero() && !entries[holdKey(cal, req, rec.Expires)] {
				problems = append(problems, fmt.Sprintf("calendar %q: request %s expires at %s but is not in the request expiry index", cal, req, rec.Expires.Format(time.RFC3339Nano)))
				if len(problems) >= maxProblems {
					return errTooMany
				}
			}
			return nil
		})
		if err == nil {
			err = tx.ForEachCreation(cal, func(id string, rec data.RequestRecord) error {
				if !rec.Expires.IsZero() && !created[holdKey(cal, id, rec.Expires)] {
					problems = append(problems, fmt.Sprintf("calendar %q: the creation record of booking %s expires at %s but is not in the request expiry index", cal, id, rec.Expires.Format(time.RFC3339Nano)))
					if len(problems) >= maxProblems {
						return errTooMany
					}
				}
				return nil
			})
		}
		if err != nil {
			if !errors.Is(err, errTooMany) {
				problems = append(problems, fmt.Sprintf("calendar %q: walk requests: %v", cal, err))
			}
			break
		}
	}
	return problems
}

func holdKey(cal, id string, exp time.Time) string {
	return cal + "\x00" + id + "\x00" + exp.UTC().Format(time.RFC3339Nano)
}

// maxProblems bounds the violations reported per calendar, so that a broken
// index of 100k bookings does not flood the test log.
const maxProblems = 20

// logNow is the latest log time the index shows for a calendar: its own
// updates and every booking's creation and cancellation. Every decision
// that put an interval into the slot index was taken at or before it, so a
// hold still live at logNow was live at each of those decisions and had
// to be counted by them. (A reschedule records no time: a booking moved
// onto a hold that had expired after logNow would be reported, wrongly.)
func logNow(cal data.Calendar, records map[string]data.Booking) time.Time {
	now := cal.UpdatedAt
	for _, bk := range records {
		if bk.CreatedAt.After(now) {
			now = bk.CreatedAt
		}
		if bk.CancelledAt != nil && bk.CancelledAt.After(now) {
			now = *bk.CancelledAt
		}
	}
	return now
}

// checkSlotRecord checks slot s against its booking record in records:
// there is one, with the status, interval, buffers and hold expiry the
// slot says. known is false for a slot without a record; err is report's
// (too many problems), which stops the walk.
func checkSlotRecord(s data.SlotEntry, records map[string]data.Booking, report func(string, ...any) error) (known bool, err error) {
	bk, ok := records[s.ID]
	if !ok {
		return false, report("slot [%s, %s) of booking %s has no booking record", s.Start, s.End, s.ID)
	}
	want := data.StatusConfirmed
	if s.Hold {
		want = data.StatusHeld
	}
	if bk.Status != want && !(want == data.StatusConfirmed && bk.Status == data.StatusPending) {
		if err := report("booking %s has a slot of a %s booking but status %q", s.ID, want, bk.Status); err != nil {
			return true, err
		}
	}
	if !bk.Start.Equal(s.Start) || !bk.End.Equal(s.End) {
		if err := report("booking %s is [%s, %s) but its slot is [%s, %s)", s.ID, bk.Start, bk.End, s.Start, s.End); err != nil {
			return true, err
		}
	}
	if bk.BufferBefore != s.BufferBefore || bk.BufferAfter != s.BufferAfter {
		if err := report("booking %s has buffers %s/%s but its slot %s/%s", s.ID, bk.BufferBefore, bk.BufferAfter, s.BufferBefore, s.BufferAfter); err != nil {
			return true, err
		}
	}
	if s.Hold && (bk.ExpiresAt == nil || !bk.ExpiresAt.Equal(s.Expires)) {
		if err := report("hold %s expires at %v but its slot at %s", s.ID, bk.ExpiresAt, s.Expires); err != nil {
			return true, err
		}
	}
	return true, nil
}

func checkCalendar(tx *data.Tx, calID string, holdIndexed map[string]bool) []string {
	var problems []string
	report := func(format string, args ...any) error {
		problems = append(problems, fmt.Sprintf("calendar %q: ", calID)+fmt.Sprintf(format, args...))
		if len(problems) >= maxProblems {
			return errTooMany
		}
		return nil
	}

	cal, err := tx.Calendar(calID)
	if err != nil && !errors.Is(err, data.ErrNotFound) {
		return append(problems, fmt.Sprintf("calendar %q: %v", calID, err))
	}
	seats := cal.Seats()

	// Booking records first: the slots are checked against them.
	records := map[string]data.Booking{}
	err = tx.ForEachBooking(calID, func(bk data.Booking) error {
		records[bk.ID] = bk
		if bk.CalendarID != calID {
			if err := report("booking %s is filed under calendar %q but says %q", bk.ID, calID, bk.CalendarID); err != nil {
				return err
			}
		}
		if bk.Status == data.StatusHeld && bk.ExpiresAt != nil && !holdIndexed[holdKey(calID, bk.ID, *bk.ExpiresAt)] {
			return report("hold %s (expires %s) is not in the hold expiry index", bk.ID, bk.ExpiresAt.Format(time.RFC3339Nano))
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, errTooMany) {
			problems = append(problems, fmt.Sprintf("calendar %q: walk bookings: %v", calID, err))
		}
		return problems
	}
	now := logNow(cal, records)

	// Slots against their records; collect the ones that count now.
	slotted := make(map[string]bool)
	var counted []data.SlotEntry
	err = tx.ForEachSlot(calID, func(s data.SlotEntry) error {
		if slotted[s.ID] {
			if err := report("booking %s has more than one slot", s.ID); err != nil {
				return err
			}
		}
		slotted[s.ID] = true
		if !s.Start.Before(s.End) {
			if err := report("slot of booking %s is empty or reversed: [%s, %s)", s.ID, s.Start, s.End); err != nil {
				return err
			}
		}
		if known, err := checkSlotRecord(s, records, report); err != nil || !known {
			return err // a slot without a record is not counted
		}
		if s.LiveAt(now) {
			counted = append(counted, s)
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, errTooMany) {
			problems = append(problems, fmt.Sprintf("calendar %q: walk slots: %v", calID, err))
		}
		return problems
	}
	for _, id := range slices.Sorted(maps.Keys(records)) {
		if bk := records[id]; data.Occupies(bk.Status) && !slotted[id] {
			if report("%s booking %s [%s, %s) has no slot", bk.Status, id, bk.Start, bk.End) != nil {
				return problems
			}
		}
	}

	if countMovesWithParts(records, counted, report) != nil {
		return problems
	}

	// Capacity: the intervals, then (when those fit) the buffered spans.
	raw := overCapacity(counted, seats, (*data.SlotEntry).Interval)
	for _, o := range raw {
		if report("confirmed bookings and live holds %v overlap at %s: %d of them, capacity %d", o.ids, o.at.Format(time.RFC3339Nano), len(o.ids), seats) != nil {
			return problems
		}
	}
	if len(raw) == 0 {
		for _, o := range overCapacity(counted, seats, (*data.SlotEntry).Buffered) {
			if report("buffer conflict: the buffered spans of %v overlap at %s: %d of them, capacity %d", o.ids, o.at.Format(time.RFC3339Nano), len(o.ids), seats) != nil {
				return problems
			}
		}
	}
	return append(problems, checkBusy(tx, calID)...)
}

// overload is an instant where more intervals than the capacity overlap.
type overload struct {
	at  time.Time
	ids []string // the intervals covering it, sorted
}

// countMovesWithParts gives every pending move record of counted its
// part's id, so that overCapacity counts the two as one booking, and
// reports the links between parts and moves that do not agree; it returns
// report's error (too many problems).
func countMovesWithParts(records map[string]data.Booking, counted []data.SlotEntry, report func(string, ...any) error) error {
	owner, problems := moveOwners(records)
	for _, p := range problems {
		if err := report("%s", p); err != nil {
			return err
		}
	}
	for i := range counted {
		if o, ok := owner[counted[i].ID]; ok {
			counted[i].ID = o
		}
	}
	return nil
}

// moveOwners maps the id of every pending move record of records to its
// part's, when the two name each other, and describes every link that is
// not so.
func moveOwners(records map[string]data.Booking) (owner map[string]string, problems []string) {
	owner = map[string]string{}
	for _, id := range slices.Sorted(maps.Keys(records)) {
		bk := records[id]
		if bk.MoveID != "" {
			if m, ok := records[bk.MoveID]; !ok || m.Status != data.StatusPending || m.MoveOf != id || bk.Status != data.StatusConfirmed {
				problems = append(problems, fmt.Sprintf("%s part %s names move %s, which is not its pending move", bk.Status, id, bk.MoveID))
			}
		}
		if bk.MoveOf != "" && bk.Status == data.StatusPending {
			if p, ok := records[bk.MoveOf]; !ok || p.MoveID != id {
				problems = append(problems, fmt.Sprintf("pending move %s of %s is not named by its part", id, bk.MoveOf))
				continue
			}
			owner[id] = bk.MoveOf
		}
	}
	return owner, problems
}

// overCapacity sweeps the intervals span(s) of slots and returns the first
// instant of every stretch in which more than seats of them overlap
// (half-open: touching intervals do not overlap). Slots of one id (a part
// and its pending move, see moveOwners) count once where they overlap.
func overCapacity(slots []data.SlotEntry, seats int, span func(*data.SlotEntry) data.Interval) []overload {
	type edge struct {
		t     time.Time
		start bool
		id    string
	}
	edges := make([]edge, 0, 2*len(slots))
	for i := range slots {
		iv := span(&slots[i])
		if iv.Start.Before(iv.End) {
			edges = append(edges, edge{iv.Start, true, slots[i].ID}, edge{iv.End, false, slots[i].ID})
		}
	}
	// Ends sort before starts at the same instant: touching is no overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.t.Compare(b.t); c != 0 {
			return c
		}
		if a.start != b.start {
			if a.start {
				return 1
			}
			return -1
		}
		return strings.Compare(a.id, b.id)
	})
	var out []overload
	active := map[string]int{}
	n, over := 0, false
	for _, e := range edges {
		if !e.start {
			if active[e.id]--; active[e.id] == 0 {
				delete(active, e.id)
			}
			n = len(active)
			over = over && n > seats
			continue
		}
		active[e.id]++
		n = len(active)
		if n > seats && !over {
			over = true
			out = append(out, overload{at: e.t, ids: slices.Sorted(maps.Keys(active))})
		}
	}
	return out
}

// checkBusy checks the external busy blocks: every live block
// has exactly one busy slot with its times, cleared blocks have none. Busy
// blocks are not bookings: they may overlap each other and bookings.
func checkBusy(tx *data.Tx, calID string) []string {
	var problems []string
	report := func(format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Sprintf("calendar %q: ", calID)+fmt.Sprintf(format, args...))
		}
	}
	blocks, err := tx.BusyBlocks(calID)
	if err != nil {
		report("busy blocks: %v", err)
		return problems
	}
	want := map[string]data.Interval{}
	for _, b := range blocks {
		if !b.Cleared {
			want[b.ID] = b.Interval()
			if !b.Start.Before(b.End) {
				report("busy block %s is empty or reversed", b.ID)
			}
		}
	}
	err = tx.ForEachBusySlot(calID, func(id string, iv data.Interval) error {
		w, ok := want[id]
		switch {
		case !ok:
			report("busy slot %s [%s, %s) has no live block", id, iv.Start, iv.End)
		case !w.Start.Equal(iv.Start) || !w.End.Equal(iv.End):
			report("busy block %s is [%s, %s) but its slot is [%s, %s)", id, w.Start, w.End, iv.Start, iv.End)
		}
		delete(want, id)
		return nil
	})
	if err != nil {
		report("walk busy slots: %v", err)
	}
	for id := range want {
		report("live busy block %s has no slot", id)
	}
	return problems
}

var errTooMany = errors.New("too many problems")

// Gunzip writes the gzip-compressed file src (a checked-in index fixture)
// uncompressed to dst.
func Gunzip(tb testing.TB, src, dst string) {
	tb.Helper()
	f, err := os.Open(src)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(dst, raw, 0o600); err != nil {
		tb.Fatal(err)
	}
}
