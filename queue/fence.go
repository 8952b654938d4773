package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Ownership epochs fence the calls an instance makes to the outside world
// for a partition (Google Calendar) in cluster mode.
//
// The partition's pin and the membership map say who sends a partition's
// side effects, but an instance learns that it lost a partition only when
// it hears about it: one cut off from NATS, paused, or slow to see the new
// map still believes it owns the partition while another instance already
// mirrors it, and its calls would land between (or after) the new owner's.
// Idempotent, ordered calls do not help when the old owner's next call is
// built from a fresh read of Google (a 412 followed by a read and a patch
// brings back an older state).
//
// So each partition has an epoch: the revision of the key
// own.<stream>.<p> in ProgressBucket, the same on every instance, raised by
// every instance that starts sending the partition's side effects (a
// claim: a put naming it). Before each call the owner renews its epoch by
// compare-and-set on the key (Update with the revision it wrote last; a
// replicated write, so a cut-off or stale instance cannot succeed), at
// most every quarter of the window, and the call must be over by the time
// the renewal was sent plus the window (the takeover timeout; less a
// margin for clock rates). A new owner claims, then waits one window
// before its first call: by then every call the old owner started under
// an epoch it had renewed before the claim has ended. An instance whose
// renewal fails (another claim, or NATS unreachable) makes no call.
//
// Left to Google's own checks: a request Google applies after its client
// gave up (inserts answer 409 to a second insert, deletes are a booking's
// last operation, patches carry If-Match).

// ErrNotOwner: this instance does not hold the partition's ownership epoch
// (another instance claimed it since, or this one does not pull the
// partition); it must not call the outside world for it.
var ErrNotOwner = errors.New("queue: this instance does not own the partition's side effects now")

// fence is one partition's epoch as held by this instance.
type fence struct {
	mu   sync.Mutex
	rev  uint64    // revision this instance wrote last (0: none held)
	sent time.Time // when that write was sent
	// ready: no call before it (a claim waits one window).
	ready time.Time
}

// ownClaim is the value of an epoch key.
type ownClaim struct {
	Instance string `json:"instance"`
}

func (g *progress) ownKey(p int) string { return "own." + g.prefix + "." + strconv.Itoa(p) }

// fenceMargin is kept off every deadline: the instances' clocks may run
// at slightly different rates.
func fenceMargin(window time.Duration) time.Duration { return max(window/20, 50*time.Millisecond) }

// FenceCalendar is asked immediately before each call that changes
// calID's copy in the outside world (Google Calendar). It returns the
// latest time the call may still be running (zero: no bound, outside
// cluster mode), or an error: then no call may be made now (ErrNotOwner,
// or NATS could not confirm the epoch). A new owner's first call for a
// partition waits one takeover timeout here.
func (n *Node) FenceCalendar(ctx context.Context, calID string) (time.Time, error) {
	if n.cluster == nil || n.progress == nil || len(n.parts) == 0 {
		return time.Time{}, nil
	}
	p := n.parts[PartitionOf(calID, len(n.parts))]
	if !p.active.Load() {
		return time.Time{}, ErrNotOwner
	}
	g, window := n.progress, n.cluster.ttl
	f := &g.fences[p.ID]
	f.mu.Lock()
	defer f.mu.Unlock()
	val, _ := json.Marshal(ownClaim{Instance: n.cluster.instance})
	if f.rev == 0 {
		if !n.mayClaim(ctx, p) {
			return time.Time{}, ErrNotOwner
		}
		sent := time.Now()
		rev, err := g.kv.Put(ctx, g.ownKey(p.ID), val)
		if err != nil {
			return time.Time{}, fmt.Errorf("queue: claim partition %d: %w", p.ID, err)
		}
		f.rev, f.sent, f.ready = rev, sent, time.Now().Add(window+fenceMargin(window))
		p.log.Info("claimed the partition's side effects; first call after the takeover timeout", "epoch", rev)
	}
	if wait := time.Until(f.ready); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return time.Time{}, ctx.Err()
		case <-t.C:
		}
	}
	if time.Since(f.sent) < window/4 {
		return f.sent.Add(window - fenceMargin(window)), nil
	}
	if !p.active.Load() {
		return time.Time{}, ErrNotOwner
	}
	sent := time.Now()
	rev, err := g.kv.Update(ctx, g.ownKey(p.ID), val, f.rev)
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		f.rev = 0
		p.log.Info("the partition's side effects were claimed by another instance; this one stops calling out for it")
		return time.Time{}, ErrNotOwner
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("queue: renew partition %d: %w", p.ID, err)
	}
	f.rev, f.sent = rev, sent
	return sent.Add(window - fenceMargin(window)), nil
}

// mayClaim reports whether this instance may take partition p's epoch:
// the membership map gives p to it, or (no map, or p given to nobody)
// the server pins p to it. Without this, two pulling instances would take
// the epoch from each other in turns and neither would call.
func (n *Node) mayClaim(ctx context.Context, p *Partition) bool {
	if m := n.members; m != nil {
		m.mu.Lock()
		mine := m.registered && !m.fallback && p.ID < len(m.assign) && m.assign[p.ID] == m.self
		nobody := m.fallback || p.ID >= len(m.assign) || m.assign[p.ID] == ""
		m.mu.Unlock()
		if mine {
			return true
		}
		if !nobody {
			return false
		}
	}
	pinned, err := p.pinned(ctx)
	return err == nil && pinned
}
