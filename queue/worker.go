package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// MaxBatch bounds how many queued messages one partition applies in one
// transaction. A batch is only what is already queued, so this matters
// when a backlog is applied (catch-up after a start or an import): the
// cost of a commit is mostly the pages it rewrites and its fsync, which
// grow far slower than the commands it carries. 2048 gave ~20% more
// catch-up throughput than 512 (BenchmarkWritersCatchUp, 3 A/B pairs);
// 8192 no clear further gain (measured with 8 partitions). The price is
// memory while catching up: the dirty pages of one commit (up to partitions
// × 2048 commands; with 8 partitions over 10,000 calendars ~150 MB, with
// the embedded default of 2 a quarter of that) live until it is written.
const MaxBatch = 2048

// Partition is the single writer of one partition: one goroutine that takes
// the partition's messages in stream order, applies what is queued as one
// batch through the store's group commit, and only then replies and acks.
type Partition struct {
	ID    int
	nc    *nats.Conn
	js    jetstream.JetStream
	store *data.Store
	log   *slog.Logger

	caughtUp atomic.Bool
	applied  atomic.Uint64
	// committed, when set, is called after every committed batch.
	committed func()
	// observe, when set, is told about every committed batch (metrics; see
	// Observer in observe.go).
	observe func(BatchStats)

	// Cluster mode (cluster.go); nil when this instance is the only one.
	cluster *clusterMode
	// reads carries read-your-writes catch-up requests to the goroutine.
	reads chan catchRequest
	chain deliveryChain
	pinMu sync.Mutex // guards pinID and cons, read by OwnedPartitions
	pinID string
	cons  jetstream.Consumer
}

// NewPartition prepares the writer of partition id.
func NewPartition(id int, nc *nats.Conn, js jetstream.JetStream, store *data.Store, log *slog.Logger) *Partition {
	return &Partition{ID: id, nc: nc, js: js, store: store, log: log.With("partition", id)}
}

// CaughtUp reports whether the partition has applied everything that was in
// the stream for it when it started.
func (p *Partition) CaughtUp() bool { return p.caughtUp.Load() }

// AppliedSeq is the last stream sequence this partition applied.
func (p *Partition) AppliedSeq() uint64 { return p.applied.Load() }

// consumer (re)creates the partition's durable consumer so that it delivers
// from the index's applied sequence + 1: the index, not the consumer's ack
// floor, says what was applied.
func (p *Partition) consumer(ctx context.Context) (jetstream.Consumer, uint64, error) {
	var applied uint64
	if err := p.store.View(func(tx *data.Tx) error { applied = tx.AppliedSeq(p.ID); return nil }); err != nil {
		return nil, 0, err
	}
	p.applied.Store(applied)
	p.chain = deliveryChain{}
	if p.cluster != nil {
		cons, err := p.clusterConsumer(ctx, applied)
		return cons, 0, err
	}
	name := ConsumerPrefix + strconv.Itoa(p.ID)
	if err := p.js.DeleteConsumer(ctx, StreamName, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, 0, fmt.Errorf("queue: reset consumer %s: %w", name, err)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "bookline single writer of partition " + strconv.Itoa(p.ID),
		FilterSubject: partitionFilter(p.ID),
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       time.Minute,
		MaxAckPending: 4 * MaxBatch,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if applied > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, applied+1
	}
	cons, err := p.js.CreateOrUpdateConsumer(ctx, StreamName, cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("queue: create consumer %s: %w", name, err)
	}
	return cons, cons.CachedInfo().NumPending, nil
}

// Run processes the partition until ctx ends; the batch in flight is
// finished (committed, answered, acked) before it returns. On a store or
// NATS failure it starts over from the index's applied sequence.
func (p *Partition) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := p.run(ctx)
		if errors.Is(err, data.ErrClosed) || ctx.Err() != nil {
			return nil
		}
		p.log.Error("partition writer restarting", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}

func (p *Partition) run(ctx context.Context) error {
	cons, backlog, err := p.consumer(ctx)
	if err != nil {
		return err
	}
	if backlog == 0 {
		p.caughtUp.Store(true)
	}
	msgs := make(chan jetstream.Msg, 2*MaxBatch)
	stop := make(chan struct{})
	opts := []jetstream.PullConsumeOpt{
		jetstream.PullMaxMessages(2 * MaxBatch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if p.cluster != nil && errors.Is(err, jetstream.ErrPinIDMismatch) {
				p.log.Info("partition taken over by another instance", "err", err)
				return
			}
			p.log.Warn("consume", "err", err)
		}),
	}
	if p.cluster != nil {
		// Every instance pulls; the server delivers to the pinned one.
		// Pulls expire within half the pin's TTL so that a live owner
		// renews its pin in time.
		opts = append(opts, jetstream.PullPriorityGroup(OwnerGroup), jetstream.PullExpiry(p.cluster.pullExpiry()))
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if p.cluster != nil {
			p.notePin(m)
		}
		select {
		case msgs <- m:
		case <-stop: // not applied, not acked: redelivered to the next run
		}
	}, opts...)
	if err != nil {
		return fmt.Errorf("queue: consume: %w", err)
	}
	defer func() {
		close(stop)
		cc.Stop()
		if p.cluster != nil && ctx.Err() != nil {
			p.release() // stopping on purpose: hand the partition over now
		}
	}()

	var seen uint64 // messages handled since start, for catch-up
	batch := make([]jetstream.Msg, 0, MaxBatch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case r := <-p.reads: // cluster mode only (nil channel otherwise)
			err := p.catchUp(ctx, r.to, "read")
			r.done <- err
			if errors.Is(err, data.ErrClosed) {
				return err
			}
			continue
		case m := <-msgs:
			batch = append(batch[:0], m)
		}
	fill:
		for len(batch) < MaxBatch {
			select {
			case m := <-msgs:
				batch = append(batch, m)
			default:
				break fill
			}
		}
		if p.cluster != nil {
			if err := p.closeGaps(ctx, batch); err != nil {
				return err
			}
		}
		err := p.apply(batch)
		n := len(batch)
		// The batch's backing array is reused: drop the messages it
		// points at, or an idle partition would keep its last batch
		// (up to MaxBatch messages with their headers) alive.
		clear(batch)
		if err != nil {
			return err
		}
		seen += uint64(n)
		if !p.caughtUp.Load() && seen >= backlog {
			p.caughtUp.Store(true)
			p.log.Info("partition caught up", "applied_seq", p.applied.Load(), "replayed", seen)
		}
	}
}

// apply decodes the batch (in this goroutine, in parallel with the other
// partitions), has it decided and committed in the store's next group
// commit, then replies and acks.
func (p *Partition) apply(batch []jetstream.Msg) error {
	in := make([]actor.Decoded, len(batch))
	for i, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("queue: message metadata: %w", err)
		}
		in[i] = actor.Decode(actor.Input{
			Seq:             meta.Sequence.Stream,
			At:              meta.Timestamp,
			SubjectCalendar: calendarOfStoredSubject(m.Subject()),
			Data:            m.Data(),
		})
	}
	var out []actor.Output
	err := p.store.Commit(func(tx *data.Tx) error {
		var err error
		out, err = actor.ApplyDeferred(tx, p.ID, in)
		return err
	})
	if err != nil {
		return err
	}
	// JSON for the replies is encoded here, after the commit, in this
	// partition's goroutine: not inside the transaction all partitions share.
	if err := actor.Render(out); err != nil {
		return err
	}
	if p.committed != nil {
		p.committed()
	}
	for i, o := range out {
		if !o.Skipped {
			p.applied.Store(o.Seq)
		}
		if in[i].Reject != nil {
			p.log.Info("command rejected", "seq", o.Seq, "code", in[i].Reject.Code, "message", in[i].Reject.Message,
				"request_id", batch[i].Headers().Get(HeaderRequestID), "trace_id", batch[i].Headers().Get(HeaderTraceID))
		}
		to := batch[i].Headers().Get(HeaderReplyTo)
		if o.Reply == nil || !ValidReplySubject(to) {
			continue
		}
		if err := p.nc.Publish(to, o.Reply); err != nil {
			p.log.Warn("reply", "seq", o.Seq, "err", err)
		}
	}
	// AckAll: acknowledging the last message acknowledges the batch.
	if err := batch[len(batch)-1].Ack(); err != nil {
		p.log.Warn("ack", "err", err)
	}
	// --- observer hook (metrics): keep this the last block of apply ---
	if p.observe != nil {
		p.observe(BatchStats{Partition: p.ID, Msgs: batch, In: in, Out: out, AppliedSeq: p.applied.Load(), Done: time.Now()})
	}
	// --- end observer hook ---
	return nil
}
