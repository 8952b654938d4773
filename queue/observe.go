package queue

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Observation hooks for metrics. The queue package knows nothing of
// Prometheus: a process that wants metrics sets NodeConfig.Observer, and the
// partition writers and the event publisher report through it.

// Observer receives the queue's observations. Its methods are called on the
// writers' goroutines and must be quick and safe for concurrent use.
type Observer interface {
	// ObserveBatch is called once per committed batch of a partition,
	// after its replies and its acknowledgement, with what the writer
	// decoded (in) and decided (out) and when the batch was done. The
	// slices belong to the writer and must not be kept or modified.
	ObserveBatch(partition int, in []actor.Decoded, out []actor.Output, done time.Time)
	// EventPublishFailed is called each time draining the outbox to the
	// event stream fails, with a short reason (see EventFailureReason).
	EventPublishFailed(reason string)
	// LogSynced is called after every sync of an embedded stream's files
	// (default --sync always; see logsync.go) with how long it took.
	LogSynced(stream string, took time.Duration)
	// StorageWriteFailed is called for every write that failed for
	// storage reasons (a full disk, see storage.go), with its component:
	// StorageIndex or StorageNATS.
	StorageWriteFailed(component string)
}

// EventFailureReason classifies an outbox publishing error into a small,
// stable set of reasons usable as a metric label.
func EventFailureReason(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		strings.Contains(err.Error(), "timed out"):
		return "timeout"
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrStreamNotFound):
		return "no_stream"
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrConnectionReconnecting):
		return "connection"
	case errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		return "backpressure"
	}
	return "other"
}

// PartitionStatus is a sample of one partition writer's state.
type PartitionStatus struct {
	Partition  int
	AppliedSeq uint64
	CaughtUp   bool
	// NumPending counts the stream's messages of the partition not yet
	// delivered to the writer (its lag); NumAckPending those delivered but
	// not yet acknowledged. Both are -1 when they could not be read (e.g.
	// while the writer recreates its consumer).
	NumPending    int64
	NumAckPending int64
	// Stalled says why the writer stopped for good (a command of a newer
	// schema); nil while it runs.
	Stalled *actor.NewerSchemaError
	// Active: this instance pulls the partition and sends its side
	// effects (always, outside a cluster; in a cluster while the
	// partition is assigned here).
	Active bool
	// HistoryMismatch: the partition is not served because the command
	// stream's history differs from what its index applied.
	HistoryMismatch bool
}

// PartitionStatuses samples every partition: applied sequence and catch-up
// state from the writer, pending counts from the consumer info (one
// JetStream API request per partition).
func (n *Node) PartitionStatuses(ctx context.Context) []PartitionStatus {
	out := make([]PartitionStatus, 0, len(n.parts))
	for _, p := range n.parts {
		st := PartitionStatus{Partition: p.ID, AppliedSeq: p.AppliedSeq(), CaughtUp: p.CaughtUp(), NumPending: -1, NumAckPending: -1,
			Stalled: p.Stalled(), Active: p.cluster == nil || p.active.Load(), HistoryMismatch: errors.Is(p.Halted(), ErrHistoryDiffers)}
		if ctx.Err() == nil {
			if c, err := n.js.Consumer(ctx, StreamName, ConsumerPrefix+strconv.Itoa(p.ID)); err == nil {
				if info, err := c.Info(ctx); err == nil {
					st.NumPending, st.NumAckPending = int64(info.NumPending), int64(info.NumAckPending)
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// OutboxDepth counts the outcome events waiting in the outbox, up to max
// (a result of max means "at least max").
func (n *Node) OutboxDepth(max int) (int, error) {
	var depth int
	err := n.store.View(func(tx *data.Tx) error {
		evs, err := tx.PendingEvents(max)
		depth = len(evs)
		return err
	})
	return depth, err
}
