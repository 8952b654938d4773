package httpapi

import (
	"context"
	"errors"
)

// What became of a command the backend could not answer. httpapi imports
// none of the adapters that raise these errors (queue's Err* values), so it
// tells them apart by behaviour, as net.Error tells a timeout: an error in
// the chain whose method reports true. cmd/bookline checks at compile time
// that queue's errors have the methods.
type (
	// UnavailableError: the command (or read) could not reach the log;
	// nothing was decided, the client may retry (503).
	UnavailableError interface{ Unavailable() bool }
	// PendingError: the command is stored and will be decided, but no
	// answer arrived in time (202 with where to poll).
	PendingError interface{ Pending() bool }
	// NotStoppedError: a skip names a command its partition is not
	// stopped at (409 not_stopped).
	NotStoppedError interface{ NotStopped() bool }
	// NoPartitionError: a skip names a partition the log does not have
	// (404).
	NoPartitionError interface{ NoPartition() bool }
)

func isUnavailable(err error) bool {
	var e UnavailableError
	return errors.As(err, &e) && e.Unavailable()
}

func isPending(err error) bool {
	var e PendingError
	return errors.As(err, &e) && e.Pending()
}

func isNotStopped(err error) bool {
	var e NotStoppedError
	return errors.As(err, &e) && e.NotStopped()
}

func isNoPartition(err error) bool {
	var e NoPartitionError
	return errors.As(err, &e) && e.NoPartition()
}

// withTrace returns ctx carrying the trace id through the configured port
// (Config.WithTraceID), or ctx unchanged without one.
func (s *Server) withTrace(ctx context.Context, id string) context.Context {
	if s.cfg.WithTraceID == nil {
		return ctx
	}
	return s.cfg.WithTraceID(ctx, id)
}
