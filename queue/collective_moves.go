package queue

import (
	"context"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// resolveMove brings a collective's move left pending (its API stopped
// between the move's prepare and its decision's last step,
// actor/collective_move.go) to the move's decision, once it is pending
// for longer than after: it asks the coordinator for an abort and applies
// whatever the coordinator answers, the first decision recorded for the
// move. Every member's move record is in the pending index, so each
// member's owner finishes its own, and all reach the one decision.
func (r *collectiveResolver) resolveMove(ctx context.Context, m *data.Booking, now time.Time) (done bool, err error) {
	if m.Status != data.StatusPending || len(m.CalendarIDs) == 0 {
		return false, nil // decided since
	}
	if now.Sub(m.CreatedAt) < r.after {
		return false, nil
	}
	commit, err := actor.RecordedDecision(ctx, r.submit, m.ID, m.CalendarIDs, actor.DecisionAbort)
	if err != nil {
		return false, err
	}
	iv := actor.IntervalSpec{Start: m.Start, End: m.End}
	applied, err := r.submit(ctx, actor.MoveApplyCommand(m.CalendarID, m.MoveOf, m.ID, m.CalendarIDs, commit, &iv))
	if err != nil {
		return false, err
	}
	r.log.Info("resolved a collective's move left pending", "calendar", m.CalendarID, "id", m.MoveOf, "move", m.ID, "commit", commit,
		"outcome", applied.Outcome, "code", applied.Code)
	return true, nil
}
