package actor

import (
	"context"
	"errors"
	"time"
)

// What the adapters exchange. queue (the log), httpapi (the API) and
// calendarsync (Google) never import one another: each depends on this
// package and on data, and cmd/bookline wires them. The errors and the
// writers' types they pass across that line are declared here, the live
// Google link status in data (googlestatus.go). The errors keep the texts
// they had when queue declared them: clients have seen them in 503 bodies.

// Errors of submitting a command to the log, besides its reply.
var (
	// ErrUnavailable means the command could not be stored in the log:
	// nothing was decided, the caller may retry.
	ErrUnavailable = errors.New("queue: command stream unavailable")
	// ErrPending means the command is stored (it will be decided) but no
	// answer arrived in time; its outcome can be read later by request id.
	ErrPending = errors.New("queue: command stored, outcome pending")
	// ErrNotStopped refuses an operator's skip: the partition is not
	// stopped at that command (or it could still be decided).
	ErrNotStopped = errors.New("the partition is not stopped at that command")
	// ErrNoPartition names a partition the log does not have.
	ErrNoPartition = errors.New("no such partition")
)

// traceKey is the context key of the trace id.
type traceKey struct{}

// WithTraceID returns ctx carrying the id of the client request a command
// serves; the log adapter sends it with the command so that the writer's
// logs can name it.
func WithTraceID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, traceKey{}, id)
}

// TraceID returns the id WithTraceID stored in ctx, or "".
func TraceID(ctx context.Context) string {
	id, _ := ctx.Value(traceKey{}).(string)
	return id
}

// AppliedBatch is one committed batch of a partition as its writer applied
// it: what it decoded, what it decided, and when the batch was committed,
// answered and acknowledged. The slices belong to the writer and must not be
// kept or modified.
type AppliedBatch struct {
	Partition int
	In        []Decoded
	Out       []Output
	Done      time.Time
}

// PartitionStatus is a sample of one partition writer's state.
type PartitionStatus struct {
	Partition  int
	AppliedSeq uint64
	CaughtUp   bool
	// NumPending counts the log's messages of the partition not yet
	// delivered to the writer (its lag); NumAckPending those delivered but
	// not yet acknowledged. Both are -1 when they could not be read (e.g.
	// while the writer recreates its consumer).
	NumPending    int64
	NumAckPending int64
	// Stalled says why the writer stopped for good (a command of a newer
	// schema); nil while it runs.
	Stalled *NewerSchemaError
	// Active: this instance pulls the partition and sends its side
	// effects (always, outside a cluster; in a cluster while the
	// partition is assigned here).
	Active bool
	// HistoryMismatch: the partition is not served because the command
	// stream's history differs from what its index applied.
	HistoryMismatch bool
}
