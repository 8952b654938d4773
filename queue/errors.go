package queue

import "context"

// Errors of the log, besides a reply: what became of a command the node
// could not answer. They are this package's; callers that must not import
// it (httpapi) tell them apart by behaviour, as net.Error tells a timeout:
// each has the methods Unavailable, Pending, NotStopped and NoPartition,
// of which exactly one reports true. cmd/bookline checks at compile time
// that they satisfy httpapi's interfaces. The texts are those clients have
// seen in 503 and 409 bodies.
var (
	// ErrUnavailable means the command could not be stored in the stream:
	// nothing was decided, the caller may retry.
	ErrUnavailable = &LogError{text: "queue: command stream unavailable", kind: logUnavailable}
	// ErrPending means the command is stored (it will be decided) but no
	// answer arrived in time; its outcome can be read later by request id.
	ErrPending = &LogError{text: "queue: command stored, outcome pending", kind: logPending}
	// ErrNotStopped refuses an operator's skip: the partition is not
	// stopped at that command (or it could still be decided).
	ErrNotStopped = &LogError{text: "the partition is not stopped at that command", kind: logNotStopped}
	// ErrNoPartition names a partition the log does not have.
	ErrNoPartition = &LogError{text: "no such partition", kind: logNoPartition}
)

// LogError is the type of the log's errors above; compare with errors.Is.
type LogError struct {
	text string
	kind logErrorKind
}

type logErrorKind uint8

const (
	logUnavailable logErrorKind = iota + 1
	logPending
	logNotStopped
	logNoPartition
)

func (e *LogError) Error() string { return e.text }

// Unavailable reports whether the command was not stored (ErrUnavailable).
func (e *LogError) Unavailable() bool { return e.kind == logUnavailable }

// Pending reports whether the command is stored but not yet answered
// (ErrPending).
func (e *LogError) Pending() bool { return e.kind == logPending }

// NotStopped reports whether a skip was refused because the partition is
// not stopped at the command (ErrNotStopped).
func (e *LogError) NotStopped() bool { return e.kind == logNotStopped }

// NoPartition reports whether a partition the log does not have was named
// (ErrNoPartition).
func (e *LogError) NoPartition() bool { return e.kind == logNoPartition }

// traceKey is the context key of the trace id.
type traceKey struct{}

// WithTraceID returns ctx carrying the id of the client request a command
// serves (the API's request id): CommandMsg sends it as HeaderTraceID, so
// that the writer's logs can name it.
func WithTraceID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, traceKey{}, id)
}

// TraceID returns the id WithTraceID stored in ctx, or "".
func TraceID(ctx context.Context) string {
	id, _ := ctx.Value(traceKey{}).(string)
	return id
}
