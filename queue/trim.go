package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/data"
)

// Bounded command streams. NATS's own limits (MaxAge, MaxBytes, MaxMsgs on
// the stream) would remove commands without regard to what any index or
// snapshot holds, so bookline refuses a command stream that has them and
// removes messages itself: after each snapshot, up to the bound configured,
// and never at or above the lowest sequence the oldest kept snapshot needs.
// Request records, holds and busy time live in the index, so they survive
// in the snapshots.

// ErrUncoveredHistory is returned for a configuration under which the
// command stream could lose messages no snapshot covers.
var ErrUncoveredHistory = errors.New("queue: configuration could remove command history that no snapshot covers")

// checkStreamBounds refuses stream configurations that remove history on
// their own, and bounds that this stream cannot apply.
func checkStreamBounds(c jetstream.StreamConfig, cfg SnapshotConfig) error {
	if c.MaxAge > 0 || c.MaxBytes > 0 || c.MaxMsgs > 0 || c.MaxMsgsPerSubject > 0 {
		return fmt.Errorf("%w: stream %s has NATS limits (max_age %s, max_bytes %d, max_msgs %d, max_msgs_per_subject %d) "+
			"that remove commands whatever the snapshots cover; remove them and bound the stream with bookline's "+
			"--stream-max-age / --stream-max-bytes instead", ErrUncoveredHistory, c.Name, c.MaxAge, c.MaxBytes, c.MaxMsgs, c.MaxMsgsPerSubject)
	}
	if cfg.trims() && c.DenyPurge {
		return fmt.Errorf("queue: stream %s denies purges (it was created without a bound, and NATS never lifts that), so "+
			"--stream-max-age / --stream-max-bytes cannot trim it; run without them, or move to a new stream created with "+
			"a bound (see README, Backups and trimming)", c.Name)
	}
	return nil
}

// trimStream removes the command stream's messages beyond the configured
// bound that lie below the oldest kept snapshot's floor. Before it does,
// it records in this instance's index that its partitions' histories are
// complete through the new first sequence (data.Tx.RaiseHorizon), where
// that is true: so a restart finds no gap.
func (n *Node) trimStream(ctx context.Context, obs jetstream.ObjectStore, cfg SnapshotConfig) error {
	list, err := listSnapshots(ctx, obs)
	if err != nil || len(list) == 0 {
		return err
	}
	oldest := list[0]
	info, err := n.stream.Info(ctx)
	if err != nil {
		return err
	}
	if oldest.Stream != streamIdentity(info) {
		return nil
	}
	first, last := firstSeq(info), info.State.LastSeq
	target := first
	if cfg.StreamMaxAge > 0 {
		seq, err := firstStoredAfter(ctx, n.stream, first, last, time.Now().Add(-cfg.StreamMaxAge))
		if err != nil {
			return err
		}
		target = max(target, seq)
	}
	if cfg.StreamMaxBytes > 0 && info.State.Msgs > 0 && info.State.Bytes > uint64(cfg.StreamMaxBytes) {
		per := info.State.Bytes / info.State.Msgs
		keep := uint64(cfg.StreamMaxBytes) / max(per, 1)
		if last > keep {
			target = max(target, last-keep+1)
		}
	}
	floor := snapshotFloor(oldest)
	purgeTo := min(target, floor)
	if purgeTo <= first {
		return nil
	}
	recent, err := firstStoredAfter(ctx, n.stream, first, last, time.Now().Add(-cfg.trimGrace()))
	if err != nil {
		return err
	}
	if purgeTo = min(purgeTo, recent); purgeTo <= first {
		return nil
	}
	// This index must not need what goes: it does not when each of its
	// partitions has applied at least what the snapshot did (the snapshot
	// says the partition has no message between that and its horizon).
	var lacking []int
	err = n.store.Commit(func(tx *data.Tx) error {
		lacking = lacking[:0]
		for p := range n.parts {
			if tx.Covered(p) < oldest.Applied[p] {
				lacking = append(lacking, p)
				continue
			}
			if err := tx.RaiseHorizon(p, purgeTo-1); err != nil {
				return err
			}
			// Checkpoints of the chain whose messages go cannot be
			// compared any more (the last one still opens a window).
			if err := tx.PruneCheckpoints(p, purgeTo); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range n.parts {
		if !slices.Contains(lacking, p.ID) && p.horizon.Load() < purgeTo-1 {
			p.horizon.Store(purgeTo - 1)
		}
	}
	if len(lacking) > 0 {
		purgeTo = min(purgeTo, n.lowestNeeded(lacking))
		if purgeTo <= first {
			n.log.Warn("not trimming the command stream: partitions of this index are behind the oldest snapshot", "partitions", lacking)
			return nil
		}
	}
	if err := n.stream.Purge(ctx, jetstream.WithPurgeSequence(purgeTo)); err != nil {
		return fmt.Errorf("queue: trim the command stream below seq %d: %w", purgeTo, err)
	}
	n.log.Info("command stream trimmed", "removed_below_seq", purgeTo, "oldest_snapshot", oldest.Name, "snapshot_floor", floor)
	return nil
}

// lowestNeeded is the lowest sequence the given partitions of this index
// still need (their covered sequence + 1).
func (n *Node) lowestNeeded(parts []int) uint64 {
	need := uint64(0)
	_ = n.store.View(func(tx *data.Tx) error {
		for _, p := range parts {
			if c := tx.Covered(p) + 1; need == 0 || c < need {
				need = c
			}
		}
		return nil
	})
	return max(need, 1)
}

// firstStoredAfter finds the first sequence in [lo, hi] stored after t
// (hi+1 when there is none), by bisection over stored times.
func firstStoredAfter(ctx context.Context, s jetstream.Stream, lo, hi uint64, t time.Time) (uint64, error) {
	end := hi + 1
	for lo < end {
		mid := lo + (end-lo)/2
		m, err := s.GetMsg(ctx, mid)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			// Removed meanwhile: look above it.
			lo = mid + 1
			continue
		}
		if err != nil {
			return 0, err
		}
		if m.Time.After(t) {
			end = mid
		} else {
			lo = mid + 1
		}
	}
	return end, nil
}
