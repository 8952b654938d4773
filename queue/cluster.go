package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
)

// Cluster mode: several bookline instances share one command
// stream on a NATS JetStream cluster. Each instance keeps its own index and
// runs a writer per partition; NATS decides which instance is active for a
// partition:
//
//   - every partition has ONE durable consumer, created once by whichever
//     instance comes first and never deleted by an instance, with the
//     pinned_client priority policy (group OwnerGroup) and PinnedTTL = the
//     takeover timeout. Every instance pulls every partition in that group;
//     the server delivers to one pinned puller only. A pinned puller that
//     stops pulling (dead, cut off) loses the pin after PinnedTTL and a
//     waiting puller of another instance is pinned instead.
//   - an instance decides nothing it has not caught up to: before it applies
//     a message at stream sequence s it makes sure its index holds every
//     earlier message of the partition (the previous owner's), reading the
//     gap from the stream (closeGaps, catchUp).
//   - reads bring the local partition up to the calendar's last message in
//     the stream first (SyncCalendar), through the partition's own goroutine,
//     so any instance reads what any owner answered.
//
// The server does not promise exclusivity at the instant of a switch: a
// stale owner may still apply messages it had buffered while the new owner
// applies them too. That is safe because apply is deterministic and every
// instance writes only its own index: both reach the same decision, and a
// requester takes the first (identical) reply.

// OwnerGroup is the consumer priority group every instance pulls in.
const OwnerGroup = "owner"

// DefaultTakeoverTimeout is how long a silent owner keeps its partitions
// (the consumers' PinnedTTL) unless configured otherwise.
const DefaultTakeoverTimeout = 5 * time.Second

// MinTakeoverTimeout is the smallest takeover timeout: pulls expire after
// half of it and nats.go's smallest pull expiry is 1s.
const MinTakeoverTimeout = 2 * time.Second

// headerPinID is the header the server puts on messages for a pinned puller.
const headerPinID = "Nats-Pin-Id"

// clusterMode is what a partition writer needs to know in cluster mode.
type clusterMode struct {
	instance string
	ttl      time.Duration
	stream   jetstream.Stream
	// progress holds the side-effect watermarks shared by the instances.
	progress *progress
}

// ackWait is a few seconds above the takeover timeout: messages a dead
// owner held unacknowledged come back after it (unless a new owner already
// read them from the stream while catching up).
func (c *clusterMode) ackWait() time.Duration { return c.ttl + 3*time.Second }

// pullExpiry keeps the pinned puller renewing its pin well inside the TTL.
func (c *clusterMode) pullExpiry() time.Duration { return max(c.ttl/2, time.Second) }

// DefaultInstanceID is hostname-pid.
func DefaultInstanceID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "bookline"
	}
	return h + "-" + strconv.Itoa(os.Getpid())
}

// catchRequest asks a partition's goroutine to apply the partition's
// messages up to stream sequence to (read-your-writes).
type catchRequest struct {
	to   uint64
	done chan error
}

// deliveryChain remembers the consumer and stream sequence of the last
// message applied from the durable consumer: a first delivery with the next
// consumer sequence is the partition's next message (no gap to check).
type deliveryChain struct {
	dseq, sseq uint64
	valid      bool
}

// clusterConsumerConfig is the shared durable consumer of partition p.
func clusterConsumerConfig(p int, ttl time.Duration, applied uint64) jetstream.ConsumerConfig {
	c := &clusterMode{ttl: ttl}
	cfg := jetstream.ConsumerConfig{
		Durable:        ConsumerPrefix + strconv.Itoa(p),
		Description:    "bookline writer of partition " + strconv.Itoa(p) + " (pinned: one active instance)",
		FilterSubject:  partitionFilter(p),
		AckPolicy:      jetstream.AckAllPolicy,
		AckWait:        c.ackWait(),
		MaxAckPending:  4 * MaxBatch,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{OwnerGroup},
		PinnedTTL:      ttl,
	}
	if applied > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, applied+1
	}
	return cfg
}

// clusterConsumer finds the partition's shared consumer, or creates it if
// no instance has yet, then catches the local index up to the partition's
// last message in the stream before the writer consumes.
func (p *Partition) clusterConsumer(ctx context.Context, applied uint64) (jetstream.Consumer, error) {
	name := ConsumerPrefix + strconv.Itoa(p.ID)
	// Instances started together all look for the consumer at once: see
	// ensure.go for why each attempt is bounded and retried.
	ectx, cancel := context.WithTimeout(ctx, ensureWait)
	defer cancel()
	cons, err := retryJS(ectx, "consumer "+name+" of stream "+StreamName, func(ctx context.Context) (jetstream.Consumer, error) {
		return p.findOrCreateConsumer(ctx, name, applied)
	})
	if err != nil {
		return nil, err
	}
	p.pinMu.Lock()
	p.cons = cons
	p.pinMu.Unlock()
	last, err := p.lastSeqFor(ctx, partitionFilter(p.ID))
	if err != nil {
		return nil, err
	}
	if err := p.catchUp(ctx, last, "start"); err != nil {
		return nil, err
	}
	return cons, nil
}

// findOrCreateConsumer returns the partition's shared consumer, creating
// it if no instance has yet (another instance may win the race: then its
// consumer is the one). A consumer left by single-instance mode, without
// priority groups, is replaced.
func (p *Partition) findOrCreateConsumer(ctx context.Context, name string, applied uint64) (jetstream.Consumer, error) {
	cons, err := p.js.Consumer(ctx, StreamName, name)
	if err == nil {
		c := cons.CachedInfo().Config
		if c.PriorityPolicy != jetstream.PriorityPolicyPinned || !slices.Contains(c.PriorityGroups, OwnerGroup) {
			p.log.Warn("replacing a consumer without priority groups for cluster mode", "consumer", name)
			if err := p.js.DeleteConsumer(ctx, StreamName, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil, fmt.Errorf("replace consumer %s: %w", name, err)
			}
			err = jetstream.ErrConsumerNotFound
		} else if c.PinnedTTL != p.cluster.ttl {
			p.log.Warn("the partition's consumer has another takeover timeout; the first instance's applies",
				"consumer", name, "pinned_ttl", c.PinnedTTL, "takeover_timeout", p.cluster.ttl)
		}
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return cons, err
	}
	_, err = p.js.CreateConsumer(ctx, StreamName, clusterConsumerConfig(p.ID, p.cluster.ttl, applied))
	if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return nil, err
	}
	// Fetch it again so that the handle carries the priority groups.
	return p.js.Consumer(ctx, StreamName, name)
}

// sharedLastSeq is lastSeqFor, its request shared with the callers waiting
// for the same subject (lastSeqs).
func (p *Partition) sharedLastSeq(ctx context.Context, subject string) (uint64, error) {
	return p.lastSeqs.get(ctx, subject)
}

// lastSeqFor is the stream sequence of the last message on subject (a
// wildcard is allowed), 0 when there is none. It asks the stream leader,
// never a replica that may lag.
func (p *Partition) lastSeqFor(ctx context.Context, subject string) (uint64, error) {
	m, err := p.cluster.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("queue: last message of %s: %w", subject, err)
	}
	return m.Sequence, nil
}

// closeGaps makes sure that applying batch skips no message of the
// partition: every message not yet applied must directly follow the one
// before it (or the index's applied sequence). A first delivery whose
// consumer sequence follows the previous one is known to; anything else is
// checked against the stream. Where a gap is found (the previous owner
// decided those messages), the partition first catches up to it.
func (p *Partition) closeGaps(ctx context.Context, batch []jetstream.Msg) error {
	last := p.applied.Load()
	chain := p.chain
	var gapTo uint64
	for _, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("queue: message metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		if seq <= last {
			continue // applied already: a redelivery, answered from the record
		}
		next := chain.valid && chain.sseq == last && meta.NumDelivered == 1 && meta.Sequence.Consumer == chain.dseq+1
		if !next {
			first, err := p.cluster.stream.GetMsg(ctx, last+1, jetstream.WithGetMsgSubject(partitionFilter(p.ID)))
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
				next = true // deleted meanwhile: nothing before it to apply
			case err != nil:
				return fmt.Errorf("queue: check partition %d after seq %d: %w", p.ID, last, err)
			default:
				next = first.Sequence >= seq
			}
		}
		if !next {
			gapTo = seq - 1
		}
		last = seq
		chain = deliveryChain{dseq: meta.Sequence.Consumer, sseq: seq, valid: meta.NumDelivered == 1}
	}
	p.chain = chain
	if gapTo > p.applied.Load() {
		return p.catchUp(ctx, gapTo, "takeover")
	}
	return nil
}

// syncTo has the partition's goroutine apply everything the stream holds on
// subject (a calendar's stored subject) before the caller reads the index.
func (p *Partition) syncTo(ctx context.Context, subject string) error {
	if e := p.Stalled(); e != nil {
		return fmt.Errorf("%w: partition %d: %v", ErrUnavailable, p.ID, e)
	}
	last, err := p.sharedLastSeq(ctx, subject)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if last == 0 {
		// No message of the calendar: it never had one, or they were
		// removed, and then what this index lacks of it is unknowable.
		info, err := p.cluster.stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if err := historyGap(p.ID, p.covered(), firstSeq(info)); err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	if p.applied.Load() >= last {
		return nil
	}
	req := catchRequest{to: last, done: make(chan error, 1)}
	select {
	case p.reads <- req:
	case <-p.stopped:
		return fmt.Errorf("%w: %w", ErrUnavailable, p.Halted())
	case <-ctx.Done():
		return fmt.Errorf("%w: partition %d writer busy or stopped", ErrUnavailable, p.ID)
	}
	select {
	case err := <-req.done:
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: partition %d catching up", ErrUnavailable, p.ID)
	}
}

// notePin remembers the pin id the server gave this instance's puller.
func (p *Partition) notePin(m jetstream.Msg) {
	if id := m.Headers().Get(headerPinID); id != "" {
		p.pinMu.Lock()
		p.pinID = id
		p.pinMu.Unlock()
	}
}

// pinned reports whether the server currently pins this instance's puller.
func (p *Partition) pinned(ctx context.Context) (bool, error) {
	mine, _, err := p.ownership(ctx)
	return mine, err
}

// ownership reports whether the server currently pins this instance's
// puller (mine), or nobody's (unowned: the owner stopped or was unpinned,
// and the server pins the next puller only when it delivers a message).
// Before the partition's consumer is known it reports neither.
func (p *Partition) ownership(ctx context.Context) (mine, unowned bool, err error) {
	p.pinMu.Lock()
	pin, cons := p.pinID, p.cons
	p.pinMu.Unlock()
	if cons == nil {
		return false, false, nil
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return false, false, err
	}
	for _, g := range info.PriorityGroups {
		if g.Group == OwnerGroup {
			return pin != "" && g.PinnedClientID == pin, g.PinnedClientID == "", nil
		}
	}
	return false, true, nil
}

// release unpins this instance from the partition when it stops gracefully,
// so that another instance takes over at once instead of after the TTL.
func (p *Partition) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ok, err := p.pinned(ctx); err != nil || !ok {
		return
	}
	if err := p.cluster.stream.UnpinConsumer(ctx, ConsumerPrefix+strconv.Itoa(p.ID), OwnerGroup); err != nil {
		p.log.Warn("unpin on stop", "err", err)
		return
	}
	p.log.Info("partition released to the other instances")
}

// SyncCalendar brings this instance's index up to the last command of
// calID in the stream (read-your-writes on any instance). Outside cluster
// mode this instance is the only writer and it returns at once. The catch-up
// runs in the partition's own goroutine; it fails with ErrUnavailable when
// the stream cannot be read or ctx ends first.
func (n *Node) SyncCalendar(ctx context.Context, calID string) error {
	if n.cluster == nil || !actor.ValidCalendarID(calID) || len(n.parts) == 0 {
		return nil
	}
	p := n.parts[PartitionOf(calID, len(n.parts))]
	return p.syncTo(ctx, PartitionSubjectPrefix+strconv.Itoa(p.ID)+"."+calID)
}

// InstanceID names this instance in cluster mode ("" otherwise).
func (n *Node) InstanceID() string {
	if n.cluster == nil {
		return ""
	}
	return n.cluster.instance
}

// OwnedPartitions lists the partitions the server currently pins to this
// instance (cluster mode; one consumer info request per partition). Outside
// cluster mode every partition is this instance's.
func (n *Node) OwnedPartitions(ctx context.Context) ([]int, error) {
	var owned []int
	for _, p := range n.parts {
		if n.cluster == nil {
			owned = append(owned, p.ID)
			continue
		}
		ok, err := p.pinned(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			owned = append(owned, p.ID)
		}
	}
	return owned, nil
}
