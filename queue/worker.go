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
	// horizon is the index's horizon of the partition (data.Tx.Horizon):
	// its history is complete through max(applied, horizon).
	horizon atomic.Uint64
	// stalled is why the writer stopped (a command of a newer schema, see
	// stall); nil while it runs.
	stalled atomic.Pointer[actor.NewerSchemaError]
	// sys reads the partition's system token: the skips the writer looks
	// up before it decides a command that may have been skipped.
	sys *systemLog
	// committed, when set, is called after every committed batch.
	committed func()
	// observe, when set, is told about every committed batch (metrics; see
	// Observer in observe.go).
	observe func(partition int, in []actor.Decoded, out []actor.Output, done time.Time)
	// logSync, when set, makes the stream's messages durable before the
	// batch that decided them is answered or shown (see logsync.go).
	logSync *logSync
	// storage, when set, is told when the writer fails, and writes again,
	// for storage reasons (storage.go); finished counts the batches it
	// answered, to tell a retry that made progress.
	storage    *storageFaults
	storageSrc string // "partition <id> writer"
	finished   uint64
	// local, when set, delivers a reply to an inbox of this process
	// without NATS and reports whether it did (Client.DeliverLocal).
	local func(subject string, reply []byte) bool
	// submitted is the last stream sequence of the batches handed to the
	// store (see submit).
	submitted uint64
	// replies gathers the answers asked for in bulk (HeaderReplyBatch).
	replies replyBatches
	// work, when set, counts the commands applied (memoryReleaser);
	// idle is set while the goroutine waits with no batch in flight and
	// no message received.
	work *atomic.Uint64
	idle atomic.Bool

	// Cluster mode (cluster.go); nil when this instance is the only one.
	cluster *clusterMode
	// reads carries read-your-writes catch-up requests to the goroutine.
	reads chan catchRequest
	// lastSeqs finds a calendar's last logged message for syncTo, one
	// request per subject at a time.
	lastSeqs lastSeqs
	chain    deliveryChain
	pinMu    sync.Mutex // guards pinID and cons, read by OwnedPartitions
	pinID    string
	cons     jetstream.Consumer
	// assigned says whether the membership map gives the partition to
	// this instance (membership.go); assignKick wakes the goroutine when
	// it changes. active is set while the goroutine pulls the partition's
	// consumer: this instance then sends the partition's side effects.
	assigned   atomic.Bool
	assignKick chan struct{}
	active     atomic.Bool

	// halted is set when the stream no longer holds messages this
	// partition needs (ErrHistoryMissing), or its history differs from
	// what the index applied (ErrHistoryDiffers); the writer has stopped
	// and stays stopped, while the other partitions go on.
	halted     atomic.Pointer[error]
	haltedOnce sync.Once
	stopped    chan struct{} // closed when halted is set
}

// NewPartition prepares the writer of partition id.
func NewPartition(id int, nc *nats.Conn, js jetstream.JetStream, store *data.Store, log *slog.Logger) *Partition {
	return &Partition{ID: id, nc: nc, js: js, store: store, log: log.With("partition", id), stopped: make(chan struct{}),
		assignKick: make(chan struct{}, 1), storageSrc: "partition " + strconv.Itoa(id) + " writer"}
}

// setAssigned tells the partition's goroutine whether to pull the
// partition (cluster mode).
func (p *Partition) setAssigned(v bool) {
	if p.assigned.Swap(v) != v {
		select {
		case p.assignKick <- struct{}{}:
		default:
		}
	}
}

// Halted is the reason this partition's writer stopped for good (the
// stream lacks history it needs, or its history differs from the
// index's), or nil.
func (p *Partition) Halted() error {
	if err := p.halted.Load(); err != nil {
		return *err
	}
	return nil
}

// halt stops serving the partition for good: it is not caught up (no
// refusals from its index, no hold expiries) and Ready says why.
func (p *Partition) halt(err error) {
	p.haltedOnce.Do(func() {
		p.halted.Store(&err)
		p.caughtUp.Store(false)
		close(p.stopped)
		what := "HISTORY MISSING"
		if errors.Is(err, ErrHistoryDiffers) {
			what = "HISTORY DIFFERS"
		}
		if e, ok := actor.AsInvariantError(err); ok {
			what = "INVARIANT VIOLATED"
			countViolation(e.Invariant)
		}
		p.log.Error(what+": this instance stops serving the partition; the others go on", "err", err)
	})
}

// stopsForGood reports whether err stops a partition's writer for good:
// the stream lacks history the partition needs, or has another history
// than the one it applied, or deciding its next messages breaks one of
// the writer's invariants (actor.InvariantError: a bug or a damaged index,
// whose batch was rolled back). Starting over cannot change any of them.
func stopsForGood(err error) bool {
	if errors.Is(err, ErrHistoryMissing) || errors.Is(err, ErrHistoryDiffers) {
		return true
	}
	_, ok := actor.AsInvariantError(err)
	return ok
}

// CaughtUp reports whether the partition has applied everything that was in
// the stream for it when it started.
func (p *Partition) CaughtUp() bool { return p.caughtUp.Load() }

// AppliedSeq is the last stream sequence this partition applied.
func (p *Partition) AppliedSeq() uint64 { return p.applied.Load() }

// covered is how far the partition's history is complete in the index.
func (p *Partition) covered() uint64 { return max(p.applied.Load(), p.horizon.Load()) }

// Stalled says why the partition's writer stopped deciding for good: it met
// a command of a schema version this build does not know (nil while it
// runs). Only a build that knows the version can go on.
func (p *Partition) Stalled() *actor.NewerSchemaError { return p.stalled.Load() }

// consumer (re)creates the partition's durable consumer so that it delivers
// from the index's applied sequence + 1: the index, not the consumer's ack
// floor, says what was applied.
func (p *Partition) consumer(ctx context.Context) (jetstream.Consumer, uint64, error) {
	var applied, horizon uint64
	if err := p.store.View(func(tx *data.Tx) error { applied, horizon = tx.AppliedSeq(p.ID), tx.Horizon(p.ID); return nil }); err != nil {
		return nil, 0, err
	}
	p.applied.Store(applied)
	p.horizon.Store(horizon)
	p.chain = deliveryChain{}
	if p.cluster != nil {
		cons, err := p.clusterConsumer(ctx, applied)
		return cons, 0, err
	}
	// The consumer is created to start at applied+1, and the server
	// starts a consumer at the first message it has without a word.
	s, err := p.js.Stream(ctx, StreamName)
	if err != nil {
		return nil, 0, fmt.Errorf("queue: command stream: %w", err)
	}
	if err := historyGap(p.ID, max(applied, horizon), firstSeq(s.CachedInfo())); err != nil {
		return nil, 0, err
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
// NATS failure it starts over from the index's applied sequence. On a
// command of a newer schema it stops deciding until ctx ends (see stall).
//
// When the stream lacks messages the partition needs (ErrHistoryMissing),
// or holds another history than the one the index applied
// (ErrHistoryDiffers), it stops for good: restarting cannot bring them
// back, and building on without them would give an index without some
// commands, or decisions on a history nobody answered from.
func (p *Partition) Run(ctx context.Context) error {
	p.stalled.Store(nil) // a new attempt (StartWriters again)
	if err := p.Halted(); err != nil {
		return err
	}
	// A writer that stops (halted, stalled, stopped) no longer fails.
	defer p.storage.clear(p.storageSrc, "")
	retry := storageRetryMin
	for ctx.Err() == nil {
		finished := p.finished
		err := p.run(ctx)
		if errors.Is(err, data.ErrClosed) || ctx.Err() != nil {
			return nil
		}
		if e, ok := errors.AsType[*actor.NewerSchemaError](err); ok {
			if !p.stall(ctx, e) {
				return nil
			}
			p.stalled.Store(nil) // an operator skipped the command: go on
			continue
		}
		if stopsForGood(err) {
			p.halt(err)
			if p.cluster != nil {
				p.release() // another instance may have the history
			}
			return err
		}
		wait := 500 * time.Millisecond
		if p.storage.fail(p.storageSrc, err) {
			// A full disk: try again soon, then less often; the batch
			// is redelivered, and its commit is the test that the
			// disk has room again.
			if p.finished != finished {
				retry = storageRetryMin
			}
			wait, retry = retry, min(2*retry, storageRetryMax)
			p.log.Warn("partition writer restarting: storage write failed", "err", err, "retry_in", wait)
		} else {
			p.log.Error("partition writer restarting", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// A writer whose writes fail for storage reasons starts over after
// storageRetryMin, doubling up to storageRetryMax: a few attempts a second
// at first, and writes resume within about that once there is room.
const (
	storageRetryMin = 100 * time.Millisecond
	storageRetryMax = time.Second
)

// maxInFlight is how many batches the writer keeps submitted and not yet
// answered. In embedded mode it decodes and submits the next batch while
// the previous one waits for its log sync, so the shared commit loop always
// has work. In cluster mode it applies one at a time: closing gaps and
// catch-up reads need the applied sequence of everything before them.
func (p *Partition) maxInFlight() int {
	if p.cluster != nil {
		return 1
	}
	return maxBatchesInFlight
}

// run is one life of the writer: it opens the partition's consumer and,
// until ctx ends or a write fails, takes the messages in batches, submits
// them to the store and answers them in order, catches up for reads and
// follows the membership map (cluster mode).
func (p *Partition) run(ctx context.Context) error {
	p.idle.Store(false)
	defer p.idle.Store(true)
	cons, backlog, err := p.consumer(ctx)
	if err != nil {
		return err
	}
	p.storage.clear(p.storageSrc, StorageNATS) // the consumer was written
	p.submitted = p.applied.Load()
	if backlog == 0 {
		p.caughtUp.Store(true)
	}
	// In cluster mode the partition is pulled only while the membership
	// map assigns it here (membership.go); the goroutine serves reads
	// either way.
	var sess *consumeSession
	if p.cluster == nil || p.assigned.Load() {
		if sess, err = p.startConsume(ctx, cons); err != nil {
			return err
		}
	}
	defer func() {
		if sess != nil {
			sess.end()
		}
		p.active.Store(false)
		if p.cluster != nil && ctx.Err() != nil {
			p.release() // stopping on purpose: hand the partition over now
		}
	}()

	maxInFlight := p.maxInFlight()
	q := &flightQueue{p: p, backlog: backlog}
	// The backlog counts what the stream holds for the partition, and
	// the server passes over a message it cannot read (a damaged block
	// file) without delivering it: such a catch-up would never count up
	// to its backlog. The consumer then has nothing left to deliver or
	// to be acknowledged.
	var pendingCheck <-chan time.Time
	if p.cluster == nil && !p.caughtUp.Load() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		pendingCheck = t.C
	}
	for {
		var headDone <-chan error
		if len(q.flight) > 0 {
			headDone = q.flight[0].done
		}
		var (
			in, msgs chan jetstream.Msg
			broken   chan struct{}
		)
		if sess != nil {
			in, msgs, broken = sess.msgs, sess.msgs, sess.broken
		}
		if len(q.flight) >= maxInFlight {
			in = nil // wait for the oldest batch first
		}
		// Idle: nothing in flight and nothing received that waits (the
		// memory releaser's sign that a bulk load ended).
		p.idle.Store(len(q.flight) == 0 && len(msgs) == 0)
		select {
		case <-ctx.Done():
			// Batches already submitted are committed by now or soon:
			// answer and ack them rather than leave them to redelivery.
			if err := q.drain(); err != nil && !errors.Is(err, data.ErrClosed) {
				p.log.Warn("finishing the batches in flight", "err", err)
			}
			return nil
		case <-p.store.Done():
			return data.ErrClosed
		case r := <-p.reads: // cluster mode only (nil channel otherwise)
			if err := p.serveRead(ctx, r, q); err != nil {
				return err
			}
		case err := <-headDone:
			if err := q.finishHead(err); err != nil {
				return err
			}
		case <-pendingCheck:
			if p.caughtUp.Load() {
				pendingCheck = nil
			} else if len(q.flight) == 0 && len(msgs) == 0 {
				p.caughtUpUnread(ctx, cons, q)
			}
		case <-broken:
			return p.pullAgain(q)
		case <-p.assignKick: // cluster mode only
			if sess, err = p.reassign(ctx, cons, sess, q); err != nil {
				return err
			}
		case m := <-in:
			if err := p.submitBatch(ctx, m, msgs, q); err != nil {
				return err
			}
		}
	}
}

// pullAgain ends a run whose pulling stopped working (consumeSession's
// broken): what was taken is answered first, and the next run pulls from
// the index's applied sequence.
func (p *Partition) pullAgain(q *flightQueue) error {
	if err := q.drain(); err != nil {
		return err
	}
	return fmt.Errorf("queue: partition %d: pulling its consumer stopped working (no responders, or the consumer deleted): pulling again", p.ID)
}

// serveRead catches the partition up for a read (cluster mode) once the
// batches in flight are answered, and tells the reader how it went. It
// returns an error only when the writer must stop.
func (p *Partition) serveRead(ctx context.Context, r catchRequest, q *flightQueue) error {
	if err := q.drain(); err != nil {
		return err
	}
	err := p.catchUp(ctx, r.to, "read")
	r.done <- err
	if _, newer := errors.AsType[*actor.NewerSchemaError](err); newer || errors.Is(err, data.ErrClosed) || stopsForGood(err) {
		return err
	}
	return nil
}

// caughtUpUnread marks the partition caught up when its consumer has
// nothing left to deliver or to be acknowledged although fewer messages
// than the backlog arrived: the server passed over messages it cannot
// read.
func (p *Partition) caughtUpUnread(ctx context.Context, cons jetstream.Consumer, q *flightQueue) {
	if info, err := cons.Info(ctx); err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
		p.caughtUp.Store(true)
		p.log.Warn("partition caught up; the stream counted messages the server did not deliver (unreadable?)",
			"applied_seq", p.applied.Load(), "replayed", q.seen, "backlog", q.backlog)
	}
}

// reassign follows the membership map (cluster mode): it starts pulling
// the partition when it is assigned here and hands it over, after
// answering what it took, when it no longer is. It returns the session
// now running (nil when none).
func (p *Partition) reassign(ctx context.Context, cons jetstream.Consumer, sess *consumeSession, q *flightQueue) (*consumeSession, error) {
	switch want := p.assigned.Load(); {
	case want && sess == nil:
		return p.startConsume(ctx, cons)
	case !want && sess != nil:
		err := p.handOver(ctx, sess, q.drain, func(batch []jetstream.Msg) error {
			b, err := p.submit(batch)
			if err != nil {
				return err
			}
			q.flight = append(q.flight, b)
			return q.drain()
		})
		return nil, err
	}
	return sess, nil
}

// The embedded mode's pulls: an idle partition pulls again every
// embeddedPullExpiry, and the server sends a heartbeat every
// embeddedPullHeartbeat while a pull waits.
const (
	embeddedPullExpiry    = 5 * time.Second
	embeddedPullHeartbeat = time.Second
)

// consumeSession is one stretch of pulling the partition's consumer.
type consumeSession struct {
	cc   jetstream.ConsumeContext
	msgs chan jetstream.Msg
	stop chan struct{}
	// broken is signalled when pulling stopped working: a pull met no
	// responders (JetStream still starting after a reload on a full disk,
	// a consumer leader moving), after which nats.go pulls again only once
	// two heartbeats are missed; or the consumer was deleted under it,
	// after which nats.go stops pulling for good. The writer starts over
	// instead.
	broken chan struct{}
}

// end stops pulling; messages received and not taken are neither applied
// nor acknowledged (redelivered, or read from the stream by the next owner).
func (s *consumeSession) end() {
	s.cc.Stop()
	close(s.stop)
}

// startConsume pulls the partition's consumer. In cluster mode it then
// catches up to the partition's last message: what a previous owner left
// undecided is decided now, and the side effects it had not sent yet are
// queued here (see progress.go), whether or not new commands arrive.
func (p *Partition) startConsume(ctx context.Context, cons jetstream.Consumer) (*consumeSession, error) {
	s := &consumeSession{msgs: make(chan jetstream.Msg, 2*MaxBatch), stop: make(chan struct{}), broken: make(chan struct{}, 1)}
	opts := []jetstream.PullConsumeOpt{
		jetstream.PullMaxMessages(2 * MaxBatch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if p.cluster != nil && errors.Is(err, jetstream.ErrPinIDMismatch) {
				p.log.Info("partition taken over by another instance", "err", err)
				return
			}
			if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrConsumerDeleted) {
				select {
				case s.broken <- struct{}{}:
				default:
				}
			}
			p.log.Warn("consume", "err", err)
		}),
	}
	if p.cluster != nil {
		// The server delivers to the pinned puller. Pulls expire within
		// half the pin's TTL so that a live owner renews its pin in time.
		opts = append(opts, jetstream.PullPriorityGroup(OwnerGroup), jetstream.PullExpiry(p.cluster.pullExpiry()))
	} else {
		// nats.go notices a pull the server dropped without a word (its
		// JetStream reloaded just then) only by missing two heartbeats:
		// 30 s with the default 30 s pulls, and the partition's commands
		// waited that long. With these, 2 s.
		opts = append(opts, jetstream.PullExpiry(embeddedPullExpiry), jetstream.PullHeartbeat(embeddedPullHeartbeat))
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if p.cluster != nil {
			p.notePin(m)
		}
		select {
		case s.msgs <- m:
		case <-s.stop: // not applied, not acked: redelivered to the next run
		}
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("queue: consume: %w", err)
	}
	s.cc = cc
	if p.cluster == nil {
		p.active.Store(true)
		return s, nil
	}
	p.chain = deliveryChain{} // deliveries while not pulling were not seen
	p.log.Info("pulling the partition (assigned to this instance)")
	last, err := p.lastSeqFor(ctx, partitionFilter(p.ID))
	if err == nil {
		err = p.catchUp(ctx, last, "assigned")
	}
	if err != nil {
		s.end()
		return nil, err
	}
	// Side effects are sent from here on: the outbox holds what the
	// previous owner may have left unsent.
	p.active.Store(true)
	return s, nil
}

// handOver stops pulling a partition the map no longer assigns here: the
// batches in flight are answered (drain), what was received is applied
// (apply; this instance is still the pinned one), then the partition is
// unpinned so the server pins the assigned instance's pull at once.
func (p *Partition) handOver(ctx context.Context, s *consumeSession, drain func() error, apply func([]jetstream.Msg) error) error {
	if err := drain(); err != nil {
		return err
	}
	s.end()
	p.active.Store(false)
	for n := len(s.msgs); n > 0; {
		batch := make([]jetstream.Msg, 0, min(n, MaxBatch))
		for len(batch) < cap(batch) {
			batch = append(batch, <-s.msgs)
		}
		n -= len(batch)
		if err := p.closeGaps(ctx, batch); err != nil {
			return err
		}
		if err := apply(batch); err != nil {
			return err
		}
	}
	p.release()
	p.log.Info("partition handed over (assigned to another instance)")
	return nil
}
