package main

import (
	"context"
	"time"

	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/httpapi"
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

// apiPorts are the API's optional features as this process has them:
// the node's log and index helpers, cluster status, snapshots and skip;
// the Google sync; the webhook endpoints. Each is on in bookline serve.
func apiPorts(n *queue.Node, google *calendarsync.Syncer, hooks *webhook.Manager) httpapi.Ports {
	p := httpapi.Ports{Refuser: n, Answerer: n, Outcomes: n, CalendarSync: n, Durability: n,
		Cluster: n, Snapshots: n, Skipper: n, Partitions: n, Versions: n}
	// A nil *Syncer or *Manager stored in an interface makes a non-nil
	// interface: the feature would read as on.
	if google != nil {
		p.Google, p.GoogleCheck, p.DeadLetters, p.GoogleNotifications = google, google, google, google
	}
	if hooks != nil {
		p.Webhooks = hooks
	}
	return p
}

// What the API gets from each adapter is checked here, at compile time:
// a renamed method fails the build instead of switching a feature off.
var (
	_ httpapi.Backend            = (*queue.Node)(nil)
	_ httpapi.Refuser            = (*queue.Node)(nil)
	_ httpapi.Answerer           = (*queue.Node)(nil)
	_ httpapi.OutcomeReader      = (*queue.Node)(nil)
	_ httpapi.CalendarSyncer     = (*queue.Node)(nil)
	_ httpapi.DurabilityReporter = (*queue.Node)(nil)
	_ httpapi.ClusterReporter    = (*queue.Node)(nil)
	_ httpapi.Snapshots          = (*queue.Node)(nil)
	_ httpapi.PartitionSkipper   = (*queue.Node)(nil)
	_ httpapi.PartitionCounter   = (*queue.Node)(nil)
	_ httpapi.SchemaGate         = (*queue.Node)(nil)

	_ httpapi.GoogleSync           = (*calendarsync.Syncer)(nil)
	_ httpapi.GoogleBookingChecker = (*calendarsync.Syncer)(nil)
	_ httpapi.GoogleDeadLetters    = (*calendarsync.Syncer)(nil)
	_ httpapi.GoogleNotifier       = (*calendarsync.Syncer)(nil)

	_ httpapi.Webhooks       = (*webhook.Manager)(nil)
	_ httpapi.WebhookSampler = (*webhook.Manager)(nil)
)

// startWebhooks opens the webhook endpoints' store on the node's NATS and
// delivers from its event stream until stop is called.
func startWebhooks(n *queue.Node, cfg webhook.Config) (m *webhook.Manager, stop func(), err error) {
	cfg.JS, cfg.Stream, cfg.SubjectPrefix = n.JetStream(), queue.EventStreamName, queue.EventSubjectPrefix
	// Batches are read whether or not this instance writes them: another
	// instance, or an earlier run, may have.
	parts := n.PartitionCount()
	cfg.BatchSubjectPrefix, cfg.PartitionOf = queue.EventBatchSubjectPrefix, func(cal string) int { return queue.PartitionOf(cal, parts) }
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
