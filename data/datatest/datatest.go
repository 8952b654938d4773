// Package datatest holds test helpers for code built on package data. It is
// imported by tests only, so none of it ships in the binary.
package datatest

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

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
//   - two confirmed bookings of one calendar overlap ([start, end) intervals);
//   - a slot has no booking record, or its record is not confirmed, or its
//     record has other times;
//   - a booking record with status confirmed has no slot;
//   - a booking record belongs to another calendar than the one it is filed
//     under, or its interval is empty.
//
// Every calendar listed by Tx.CalendarIDs is checked. It reports every
// violation it finds (up to a limit per calendar), not only the first.
func CheckInvariants(tb testing.TB, s *data.Store) {
	tb.Helper()
	err := s.View(func(tx *data.Tx) error {
		CheckTx(tb, tx)
		return nil
	})
	if err != nil {
		tb.Errorf("datatest: invariants: read index: %v", err)
	}
}

// CheckTx is CheckInvariants on the state seen by tx, which may be a
// read-write transaction that is still open (its own writes included).
func CheckTx(tb testing.TB, tx *data.Tx) {
	tb.Helper()
	for _, calID := range tx.CalendarIDs() {
		for _, p := range checkCalendar(tx, calID) {
			tb.Errorf("datatest: invariant violated: %s", p)
		}
	}
}

// maxProblems bounds the violations reported per calendar, so that a broken
// index of 100k bookings does not flood the test log.
const maxProblems = 20

func checkCalendar(tx *data.Tx, calID string) []string {
	var problems []string
	report := func(format string, args ...any) error {
		problems = append(problems, fmt.Sprintf("calendar %q: ", calID)+fmt.Sprintf(format, args...))
		if len(problems) >= maxProblems {
			return errTooMany
		}
		return nil
	}

	// Slots: no instant may be covered by more confirmed bookings than the
	// calendar's capacity (1 unless its rules say otherwise).
	seats := 1
	if c, err := tx.Calendar(calID); err == nil {
		seats = c.Seats()
	}
	slotted := make(map[string]bool)
	var live []data.Interval // intervals covering the current start, for the sweep
	liveIDs := []string{}
	err := tx.ForEachConfirmed(calID, func(id string, iv data.Interval) error {
		if slotted[id] {
			if err := report("booking %s has more than one slot", id); err != nil {
				return err
			}
		}
		slotted[id] = true
		if !iv.Start.Before(iv.End) {
			if err := report("slot of booking %s is empty or reversed: [%s, %s)", id, iv.Start, iv.End); err != nil {
				return err
			}
		}
		// Slots come in start order: drop the intervals that ended, then
		// the ones left all cover iv.Start.
		keep, keepIDs := live[:0], liveIDs[:0]
		for i, l := range live {
			if l.End.After(iv.Start) {
				keep, keepIDs = append(keep, l), append(keepIDs, liveIDs[i])
			}
		}
		live, liveIDs = append(keep, iv), append(keepIDs, id)
		if len(live) > seats {
			if err := report("confirmed bookings %v overlap at %s: %d of them, capacity %d", liveIDs, iv.Start, len(live), seats); err != nil {
				return err
			}
		}
		bk, err := tx.Booking(calID, id)
		switch {
		case errors.Is(err, data.ErrNotFound):
			return report("slot [%s, %s) of booking %s has no booking record", iv.Start, iv.End, id)
		case err != nil:
			return report("booking %s: %v", id, err)
		}
		if bk.Status != data.StatusConfirmed {
			if err := report("booking %s has a slot but status %q", id, bk.Status); err != nil {
				return err
			}
		}
		if !bk.Start.Equal(iv.Start) || !bk.End.Equal(iv.End) {
			if err := report("booking %s is [%s, %s) but its slot is [%s, %s)", id, bk.Start, bk.End, iv.Start, iv.End); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errTooMany) {
		problems = append(problems, fmt.Sprintf("calendar %q: walk slots: %v", calID, err))
	}
	if len(problems) >= maxProblems {
		return problems
	}

	// Booking records: every confirmed one must have been seen as a slot.
	err = tx.ForEachBooking(calID, func(bk data.Booking) error {
		if bk.CalendarID != calID {
			if err := report("booking %s is filed under calendar %q but says %q", bk.ID, calID, bk.CalendarID); err != nil {
				return err
			}
		}
		if bk.Status == data.StatusConfirmed && !slotted[bk.ID] {
			return report("confirmed booking %s [%s, %s) has no slot", bk.ID, bk.Start, bk.End)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errTooMany) {
		problems = append(problems, fmt.Sprintf("calendar %q: walk bookings: %v", calID, err))
	}
	return append(problems, checkBusy(tx, calID)...)
}

// checkBusy checks the external busy blocks (issue 5): every live block
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
