package webhook

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// A delivery loop sends an event only while the event is its own: NATS
// gives an unacknowledged event to another puller (the next pinned
// instance) only once AckWait has passed since the last "in progress" it
// received for it, or once it was handed back (nak). So the event is this
// loop's from the moment it sent the pull request that brought it until
// AckWait later, and every "in progress" the server confirms before that
// moment ran out extends it to AckWait after the confirmation was sent.
// The lease tracks that moment (less a margin for clock rates), cuts off an
// attempt still running when it ends, and lets no attempt start after it
// ended or while the NATS connection is down: an instance that lost NATS
// sends nothing more, and the instance that gets the event next sends its
// first attempt only after the last one of the old instance was over.
//
// What the lease cannot prevent: an attempt whose request reached the
// receiver before the lease ended, answered 2xx, whose ack never reached
// NATS (the instance died or lost NATS in between) is delivered again by
// the next instance, with the same webhook-id.

// leaseMargin is kept off the end of a lease: NATS counts AckWait on its
// own clock.
func leaseMargin(ackWait time.Duration) time.Duration { return max(ackWait/10, 100*time.Millisecond) }

type lease struct {
	nc      *nats.Conn
	reply   string
	ackWait time.Duration

	ctx    context.Context // ends with the lease
	cancel context.CancelFunc
	done   chan struct{}
	exited chan struct{}

	mu    sync.Mutex
	until time.Time
	lost  bool

	stopOnce sync.Once
}

// newLease holds the event of msg, delivered on a pull request sent at
// pulled, until stop is called or it cannot be kept.
func newLease(nc *nats.Conn, reply string, pulled time.Time, ackWait time.Duration) *lease {
	ctx, cancel := context.WithCancel(context.Background())
	ls := &lease{nc: nc, reply: reply, ackWait: ackWait, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), exited: make(chan struct{}),
		until: pulled.Add(ackWait - leaseMargin(ackWait))}
	go ls.keep()
	return ls
}

// keep says "in progress" a few times per AckWait, confirmed, and ends
// the lease when no confirmation came in time.
func (ls *lease) keep() {
	defer close(ls.exited)
	tick := time.NewTicker(ls.ackWait / 4)
	defer tick.Stop()
	expire := time.NewTimer(time.Until(ls.end()))
	defer expire.Stop()
	for {
		select {
		case <-ls.done:
			return
		case <-expire.C:
			ls.lose()
			return
		case <-tick.C:
			sent := time.Now()
			until := ls.end()
			rctx, cancel := context.WithDeadline(context.Background(), until)
			_, err := ls.nc.RequestWithContext(rctx, ls.reply, []byte("+WPI"))
			cancel()
			// Only a confirmation that came back while the event was
			// still ours extends the lease: after that NATS may have
			// given it to another instance, whose delivery this "in
			// progress" would then be about.
			if err == nil && time.Now().Before(until) {
				ls.mu.Lock()
				ls.until = sent.Add(ls.ackWait - leaseMargin(ls.ackWait))
				ls.mu.Unlock()
				expire.Reset(time.Until(ls.end()))
			}
		}
	}
}

func (ls *lease) end() time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.until
}

// lose marks the lease lost and cuts off what runs under it.
func (ls *lease) lose() {
	ls.mu.Lock()
	ls.lost = true
	ls.mu.Unlock()
	ls.cancel()
}

// valid reports whether the event is still this loop's, and NATS reachable
// to say so: only then may an attempt start or the event be handed back.
func (ls *lease) valid() bool {
	ls.mu.Lock()
	ok := !ls.lost && time.Now().Before(ls.until)
	ls.mu.Unlock()
	if ok && !ls.nc.IsConnected() {
		ls.lose()
		return false
	}
	return ok
}

// stop releases the lease (the event was acked, handed back or given up).
func (ls *lease) stop() {
	ls.stopOnce.Do(func() {
		close(ls.done)
		<-ls.exited
		ls.cancel()
	})
}
