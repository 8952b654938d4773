package main

import (
	"context"
	"time"

	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/httpapi/webhook"
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
		// Each mirror call is fenced by the partition's ownership epoch:
		// an old owner's call cannot run past a new owner's first.
		if cfg.Fence == nil {
			cfg.Fence = n.FenceCalendar
		}
		// Push channels (with tokens sealed by cfg.Key) in NATS: they
		// survive a restart and a change of owner.
		if cfg.Channels == nil && cfg.WebhookURL != "" {
			cfg.Channels = n.GoogleChannels()
		}
		// A notification may reach an instance that does not own the
		// calendar: its index is caught up before the read.
		if cfg.CatchUp == nil {
			cfg.CatchUp = n.SyncCalendar
		}
		*made = calendarsync.New(cfg, n.Store(), n.SubmitInternal)
		return *made
	}
}

// apiBackend is what the API serves from: the node (log, index, readiness,
// refusals, cluster reads) and the Google sync's link status and
// on-demand read.
type apiBackend struct {
	*queue.Node
	*webhook.Manager
	google *calendarsync.Syncer
}

// startWebhooks opens the webhook endpoints' store on the node's NATS and
// delivers from its event stream until stop is called.
func startWebhooks(n *queue.Node, cfg webhook.Config) (m *webhook.Manager, stop func(), err error) {
	cfg.JS, cfg.Stream, cfg.SubjectPrefix = n.JetStream(), queue.EventStreamName, queue.EventSubjectPrefix
	// The bucket's replicas are the node's (--replicas resolved), and it is
	// created the way the node's own are: retried while a fresh cluster
	// settles, an existing one with fewer replicas refused.
	cfg.Replicas, cfg.EnsureBucket = n.Replicas(), n.EnsureKeyValue
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if m, err = webhook.Open(ctx, cfg); err != nil {
		return nil, nil, err
	}
	run, end := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(run)
	}()
	return m, func() { end(); <-done }, nil
}

func (b apiBackend) GoogleStatus(calID string, link *data.GoogleLink) data.GoogleStatus {
	return b.google.Status(calID, link)
}

func (b apiBackend) SyncGoogle(ctx context.Context, calID string) (data.BusySyncResult, error) {
	return b.google.SyncBusy(ctx, calID)
}

func (b apiBackend) CheckGoogleBooking(ctx context.Context, calID string, iv data.Interval) error {
	return b.google.CheckBooking(ctx, calID, iv)
}

func (b apiBackend) GoogleDeadLetters(calID string, max int) ([]data.DeadLetter, error) {
	return b.google.DeadLetters(calID, max)
}

func (b apiBackend) RetryGoogleDeadLetter(calID string, seq uint64, sub uint32) error {
	return b.google.RetryDeadLetter(calID, seq, sub)
}

func (b apiBackend) DropGoogleDeadLetter(calID string, seq uint64, sub uint32) error {
	return b.google.DropDeadLetter(calID, seq, sub)
}

func (b apiBackend) GoogleNotification(channelID, token, state string) error {
	return b.google.Notification(channelID, token, state)
}
