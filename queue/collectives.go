package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// DefaultCollectiveResolveAfter is how long a collective's part may stay
// pending before its partition's owner resolves it: far longer than an API
// takes from a prepare to the decision, which it does within its reply
// timeout.
const DefaultCollectiveResolveAfter = 30 * time.Second

// collectiveResolver finishes collective bookings whose API stopped
// between the prepare and the decision's last step (actor/collective.go,
// collective_votes.go): for a part pending longer than after, it learns
// every member's vote (actor.ResolveCollective), and applies the decision
// the coordinator records from them (the first one recorded), so every
// member ends in that one decision. A held part past its expiry gets the
// coordinator's expire decision. Like the hold
// expirer it acts only for partitions this instance may publish for, from
// an index that is caught up.
type collectiveResolver struct {
	n     *Node
	log   *slog.Logger
	every time.Duration
	after time.Duration
	now   func() time.Time
}

// pendingPerTick bounds the parts one tick resolves.
const pendingPerTick = 256

func (r *collectiveResolver) run(ctx context.Context) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := r.once(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("resolving pending collective parts", "resolved", n, "err", err)
		}
	}
}

// once resolves the parts pending since before now - after, of the
// partitions this instance may publish for; it returns how many it
// resolved.
func (r *collectiveResolver) once(ctx context.Context) (int, error) {
	parts := r.n.parts
	if len(parts) == 0 {
		return 0, nil
	}
	now := r.now()
	var due []data.PendingPart
	withDue := map[int]bool{}
	if err := r.n.store.View(func(tx *data.Tx) error {
		due = tx.PendingBefore(now, pendingPerTick, func(cal string) bool {
			withDue[PartitionOf(cal, len(parts))] = true
			return true
		})
		return nil
	}); err != nil || len(due) == 0 {
		return 0, err
	}
	mine := map[int]bool{}
	for p := range withDue {
		ok, _, err := r.n.holds.publishable(ctx, parts[p])
		if err != nil {
			r.log.Debug("who owns the partition", "partition", p, "err", err)
		}
		mine[p] = ok
	}
	resolved := 0
	var errs []error
	for _, pp := range due {
		if !mine[PartitionOf(pp.Calendar, len(parts))] {
			continue
		}
		done, err := r.resolve(ctx, pp, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", pp.Calendar, pp.ID, err))
			continue
		}
		if done {
			resolved++
		}
	}
	return resolved, errors.Join(errs...)
}

// resolve brings one pending part to its collective's decision when it is
// due: a held part once it expired, another once it is pending for longer
// than after.
func (r *collectiveResolver) resolve(ctx context.Context, pp data.PendingPart, now time.Time) (done bool, err error) {
	var bk data.Booking
	if err := r.n.store.View(func(tx *data.Tx) (err error) {
		bk, err = tx.Booking(pp.Calendar, pp.ID)
		return err
	}); err != nil {
		return false, err
	}
	if bk.MoveOf != "" {
		return r.resolveMove(ctx, &bk, now)
	}
	if bk.Status != data.StatusPending || len(bk.CalendarIDs) == 0 {
		return false, nil // decided since
	}
	if bk.ExpiresAt == nil && now.Sub(bk.CreatedAt) < r.after || bk.ExpiresAt != nil && now.Before(*bk.ExpiresAt) {
		return false, nil // not due yet
	}
	spec := actor.BookingSpec{Start: bk.Start, End: bk.End, Customer: bk.Customer, Metadata: bk.Metadata}
	var commit bool
	if bk.ExpiresAt != nil {
		// A hold's expiry is decided by its coordinator alone.
		commit, err = actor.RecordedDecision(ctx, r.submit, bk.ID, bk.CalendarIDs, actor.DecisionExpire)
	} else {
		commit, err = actor.ResolveCollective(ctx, r.submit, bk.ID, bk.CalendarIDs, &spec)
	}
	if err != nil {
		return false, err
	}
	applied, err := r.submit(ctx, actor.ApplyCommand(bk.CalendarID, bk.ID, bk.CalendarIDs, commit, &spec))
	if err != nil {
		return false, err
	}
	r.log.Info("resolved a collective part left pending", "calendar", bk.CalendarID, "id", bk.ID, "commit", commit,
		"outcome", applied.Outcome, "code", applied.Code)
	return true, nil
}

func (r *collectiveResolver) submit(ctx context.Context, cmd *actor.Command) (actor.Reply, error) {
	var reply actor.Reply
	if errs := cmd.Validate(); len(errs) > 0 {
		return reply, fmt.Errorf("invalid %s: %v", cmd.Type, errs)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := r.n.Submit(ctx, cmd, cmd.Fingerprint())
	if err != nil {
		return reply, err
	}
	return reply, json.Unmarshal(raw, &reply)
}
