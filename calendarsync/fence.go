package calendarsync

import (
	"context"
	"time"
)

// In a cluster, an instance that lost a calendar's partition without
// hearing of it (cut off from NATS, paused, slow to see the new map) would
// go on mirroring: a call in flight would land after the new owner's
// first, and its retry (a 412, a fresh read, a patch) would bring an older
// state back. Config.Fence (queue.Node.FenceCalendar: the partition's
// ownership epoch) is asked immediately before every mirror call, reads
// included, and bounds the call; a refusal stops the drainer.

// fenceError: Config.Fence refused a mirror call.
type fenceError struct{ err error }

func (e *fenceError) Error() string { return "calendarsync: not calling google: " + e.err.Error() }
func (e *fenceError) Unwrap() error { return e.err }

// mirrorCtx bounds one mirror call of bookline calendar cal: after the
// rate limiter, the fence is asked last, immediately before the call, and
// its deadline bounds the call besides CallTimeout.
func (s *Syncer) mirrorCtx(ctx context.Context, cal string) (context.Context, context.CancelFunc, error) {
	_ = s.limiter.Wait(ctx)
	if s.cfg.Fence == nil {
		c, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		return c, cancel, nil
	}
	until, err := s.cfg.Fence(ctx, cal)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, &fenceError{err}
	}
	deadline := time.Now().Add(s.cfg.CallTimeout)
	if !until.IsZero() && until.Before(deadline) {
		deadline = until
	}
	c, cancel := context.WithDeadline(ctx, deadline)
	return c, cancel, nil
}
