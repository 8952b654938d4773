package queue

import (
	"context"
	"time"
)

// followInterval is how often, in cluster mode, an instance brings the
// partitions it does not own up to the stream's end. Reads catch a
// partition up anyway; following in the background also keeps an index
// that nobody reads from falling behind a command stream that is trimmed
// below its snapshots (a partition whose history is gone from the stream
// could no longer catch up).
const followInterval = 10 * time.Second

// follow catches up the partitions other instances own, until ctx ends.
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
		for _, p := range n.Parts {
			if !p.caughtUp.Load() || p.Stalled() != nil {
				continue // still starting, or stopped at a command it cannot decide
			}
			if mine, _, err := p.ownership(ctx); err != nil || mine {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, max(n.followEvery, 5*time.Second))
			err := p.syncTo(cctx, partitionFilter(p.ID))
			cancel()
			if err != nil && ctx.Err() == nil {
				n.log.Warn("following a partition owned by another instance", "partition", p.ID, "err", err)
			}
		}
	}
}
