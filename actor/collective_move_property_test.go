package actor_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// The moves of TestCollectivesAndPoolsAcrossPartitions: an "API" that
// moves a collective through its steps and may stop after any of them,
// the owners' resolution of a move left pending, and the checks that
// every collective ended up at one interval on all of its calendars.

// moveRandomly moves the collective of request req on ids under request
// moveReq, as the HTTP API does: prepares on every member (in a random
// order), the decision, the members' commits or aborts; crash stops it
// before any step. The new interval is half an hour from the part's own
// (overlapping it), in the hours the rest of the load books, or in later
// ones that only moves reach (mostly free: moves that commit).
func (ps *partitions) moveRandomly(rng *rand.Rand, moveReq, req string, ids []string, crash func() bool) {
	part := actor.CollectiveID(ids, req)
	var s time.Time
	switch rng.IntN(3) {
	case 0:
		_ = ps.parts[ps.of[ids[0]]].s.View(func(tx *data.Tx) error {
			bk, _ := tx.Booking(ids[0], part)
			s = bk.Start.Add(time.Duration(30*(2*rng.IntN(2)-1)) * time.Minute)
			return nil
		})
	case 1:
		s = at(60 * (2 + rng.IntN(20)))
	default:
		s = at(60 * (22 + rng.IntN(20)))
	}
	e := s.Add(time.Duration(30*(1+rng.IntN(3))) * time.Minute)
	order := slices.Clone(ids)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	all := true
	var yes []string
	for _, c := range order {
		if crash() {
			return
		}
		if ps.send(c, moveCmd(c, moveReq, req, ids, s, e)).Outcome == actor.OutcomeAccepted {
			yes = append(yes, c)
		} else {
			all = false
		}
	}
	decision := actor.DecisionAbort
	if all {
		decision = actor.DecisionCommit
	}
	move := actor.MoveID(part, moveReq)
	commit, _ := actor.Committed(ptr(ps.send(ids[0], decideCmdByID(move, ids, decision))))
	typ, targets := actor.TypeCollectiveMoveAbort, yes
	if commit {
		typ, targets = actor.TypeCollectiveMoveCommit, ids
	}
	for _, c := range targets {
		if crash() {
			return
		}
		ps.send(c, moveStepCmd(typ, c, part, moveReq, ids, s, e))
	}
}

// resolveMove is what the partition's owner does with m, a move record
// left pending: asks the coordinator for an abort, applies its answer.
func (ps *partitions) resolveMove(t *testing.T, m data.Booking) {
	t.Helper()
	d := ps.send(m.CalendarIDs[0], decideCmdByID(m.ID, m.CalendarIDs, actor.DecisionAbort))
	commit, ok := actor.Committed(&d)
	if !ok {
		t.Fatalf("decide of move %s: %+v", m.ID, d)
	}
	body := actor.MoveApplyCommand(m.CalendarID, m.MoveOf, m.ID, m.CalendarIDs, commit, &actor.IntervalSpec{Start: m.Start, End: m.End})
	raw, err := actor.MarshalCommand(body)
	if err != nil {
		t.Fatal(err)
	}
	if r := ps.send(m.CalendarID, string(raw)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("resolving move %s on %s: %+v", m.ID, m.CalendarID, r)
	}
}

// checkMovedAlike checks the collective of request req on ids after every
// move was resolved: no member has a move pending, and when it occupies
// every member it does so at one interval.
func (ps *partitions) checkMovedAlike(t *testing.T, ids []string, req string) {
	t.Helper()
	id := actor.CollectiveID(ids, req)
	var where []string
	occupying := 0
	for _, c := range ids {
		_ = ps.parts[ps.of[c]].s.View(func(tx *data.Tx) error {
			bk, err := tx.Booking(c, id)
			if err != nil {
				return nil
			}
			if bk.MoveID != "" {
				t.Errorf("collective %s on %s: move %s still pending", id, c, bk.MoveID)
			}
			if data.Occupies(bk.Status) {
				occupying++
				where = append(where, bk.Start.Format(time.RFC3339)+"/"+bk.End.Format(time.RFC3339))
			}
			return nil
		})
	}
	if occupying == len(ids) && len(slices.Compact(slices.Clone(where))) != 1 {
		t.Errorf("collective %s of %v is at %s: moved on some members only", id, ids, strings.Join(where, ", "))
	}
}

// movesDone counts the move records of every partition by status, for
// the test's log: a run that moved nothing proves nothing.
func (ps *partitions) movesDone() map[string]int {
	n := map[string]int{}
	for _, h := range ps.parts {
		_ = h.s.View(func(tx *data.Tx) error {
			for _, c := range tx.CalendarIDs() {
				_ = tx.ForEachBooking(c, func(bk data.Booking) error {
					if bk.MoveOf != "" {
						n[bk.Status]++
					}
					return nil
				})
			}
			return nil
		})
	}
	return n
}

// confirmed reports whether the collective of request req on ids is
// confirmed on its first calendar.
func (ps *partitions) confirmed(ids []string, req string) bool {
	ok := false
	_ = ps.parts[ps.of[ids[0]]].s.View(func(tx *data.Tx) error {
		bk, err := tx.Booking(ids[0], actor.CollectiveID(ids, req))
		ok = err == nil && bk.Status == data.StatusConfirmed
		return nil
	})
	return ok
}

// moveReqOf is the request id of the n-th operation's move.
func moveReqOf(n int) string { return fmt.Sprint("m", n) }
