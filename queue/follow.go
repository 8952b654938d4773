package queue

import (
	"context"
	"time"

	"github.com/bookline/bookline/data"
)

// followInterval is how often, in cluster mode, an instance brings the
// partitions it does not own up to the stream's end. Reads catch a
// partition up anyway; following in the background also keeps an index
// that nobody reads from falling behind a command stream that is trimmed
// below its snapshots (a partition whose history is gone from the stream
// could no longer catch up).
const followInterval = 10 * time.Second

// follow catches up the partitions other instances own, until ctx ends.
// Each round it also records how far every partition's history is
// complete in this index (its horizon, data.Tx.Horizon): once partition p
// has applied its last message in the stream, p has nothing this index
// lacks up to the stream's end as read before. A partition whose last
// message is older than what another instance trims away then still
// passes the history checks at the next start.
func (n *Node) follow(ctx context.Context) {
	if n.cluster == nil {
		return
	}
	tick := time.NewTicker(n.followEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		info, err := n.stream.Info(ctx)
		if err != nil {
			continue
		}
		end := info.State.LastSeq
		raise := map[int]uint64{}
		for _, p := range n.parts {
			if !p.caughtUp.Load() || p.Stalled() != nil {
				continue // still starting, or stopped at a command it cannot decide
			}
			mine, _, err := p.ownership(ctx)
			if err != nil {
				continue
			}
			if !mine {
				cctx, cancel := context.WithTimeout(ctx, max(n.followEvery, 5*time.Second))
				err := p.syncTo(cctx, partitionFilter(p.ID))
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						n.log.Warn("following a partition owned by another instance", "partition", p.ID, "err", err)
					}
					continue
				}
			}
			last, err := p.lastSeqFor(ctx, partitionFilter(p.ID))
			if err == nil && p.applied.Load() >= last && end > p.horizon.Load() {
				raise[p.ID] = end
			}
		}
		if len(raise) == 0 {
			continue
		}
		err = n.store.Commit(func(tx *data.Tx) error {
			for p, h := range raise {
				if err := tx.RaiseHorizon(p, h); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			n.log.Warn("record partition horizons", "err", err)
			continue
		}
		for _, p := range n.parts {
			if h, ok := raise[p.ID]; ok && h > p.horizon.Load() {
				p.horizon.Store(h)
			}
		}
	}
}
