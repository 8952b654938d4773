package main

import (
	"context"

	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
)

// The adapters (queue: NATS and the writers; httpapi: the API;
// calendarsync: Google) do not know one another; this is where they meet.

// googleFollower makes the Google sync a follower of the node's writers:
// it reads the node's index and sends busy time through its log, and logs
// with the node's logger (which names the instance in cluster mode) unless
// cfg has one. *made is set to the sync once the node built it.
func googleFollower(cfg calendarsync.Config, made **calendarsync.Syncer) func(*queue.Node) queue.Follower {
	return func(n *queue.Node) queue.Follower {
		if cfg.Logger == nil {
			cfg.Logger = n.Logger()
		}
		// In a cluster only the owner of a calendar's partition mirrors
		// and polls it, going on from what Google confirmed for the
		// instance before it.
		if cfg.Owns == nil {
			cfg.Owns = n.OwnsCalendar
		}
		if cfg.Progress == nil {
			cfg.Progress = n
		}
		*made = calendarsync.New(cfg, n.Store, n.SubmitInternal)
		return *made
	}
}

// apiBackend is what the API serves from: the node (log, index, readiness,
// refusals, cluster reads) and the Google sync's link status and
// on-demand read.
type apiBackend struct {
	*queue.Node
	google *calendarsync.Syncer
}

func (b apiBackend) GoogleStatus(calID string, link *data.GoogleLink) data.GoogleStatus {
	return b.google.Status(calID, link)
}

func (b apiBackend) SyncGoogle(ctx context.Context, calID string) (data.BusySyncResult, error) {
	return b.google.SyncBusy(ctx, calID)
}
