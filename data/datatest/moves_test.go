package datatest_test

import (
	"path/filepath"
	"testing"

	"github.com/bookline/bookline/data"
)

// movingPart is a collective's part id at [start, end) whose pending move
// is move, and move its record at [mStart, mEnd).
func movingPart(id, move string, start, end, mStart, mEnd int) (data.Booking, data.Booking) {
	p, m := bk(id, start, end), bk(move, mStart, mEnd)
	p.CalendarIDs, m.CalendarIDs = []string{"cal", "other"}, []string{"cal", "other"}
	p.MoveID, m.MoveOf, m.Status = move, id, data.StatusPending
	return p, m
}

// TestCheckInvariantsMoves: a part may overlap its own pending move and
// nothing else; the links between a part and its move must agree.
func TestCheckInvariantsMoves(t *testing.T) {
	ok := func(name string, bks ...data.Booking) {
		t.Run(name, func(t *testing.T) {
			s := open(t, filepath.Join(t.TempDir(), "i.db"))
			defer s.Close()
			put(t, s, bks...)
			check(t, s)
		})
	}
	bad := func(name, want string, bks ...data.Booking) {
		t.Run(name, func(t *testing.T) {
			s := open(t, filepath.Join(t.TempDir(), "i.db"))
			defer s.Close()
			put(t, s, bks...)
			check(t, s, want)
		})
	}
	p, m := movingPart("p", "m", 0, 60, 30, 90)
	ok("own move", p, m)
	ok("own move, a neighbour", p, m, bk("n", 90, 120))
	bad("another booking over the move", "overlap", p, m, bk("n", 80, 100))
	q, qm := movingPart("q", "qm", 100, 160, 40, 70)
	bad("another part's move", "overlap", p, m, q, qm)
	unlinked := p
	unlinked.MoveID = ""
	bad("a move its part does not name", "not named by its part", unlinked, m)
	lost := m
	lost.Status = data.StatusAborted
	bad("a part naming an aborted move", "which is not its pending move", p, lost)
}
