package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Outcome events: every decided command produces one, on
// bookline.evt.<calendar id>, kept in the BOOKLINE_EVT stream.
const (
	EventStreamName    = "BOOKLINE_EVT"
	EventSubjectPrefix = "bookline.evt."
	// EventSubjectInvalid carries outcomes of messages whose subject token
	// is not a valid calendar id.
	EventSubjectInvalid = "bookline.evt-invalid"
	// EventBatchSubjectPrefix starts the subjects of event batch messages
	// (EventBatchSubject): with --event-batches, the events of one drain
	// of one partition, one line each (eventbatch.go).
	EventBatchSubjectPrefix = "bookline.evt-batch."
	// EventDuplicateWindow dedupes re-sent events (Nats-Msg-Id EventMsgID)
	// after a crash between publishing and deleting them from the outbox:
	// the outbox is re-sent as soon as the node is back, so minutes
	// suffice. JetStream keeps every id of the window in memory (about
	// 100 bytes each: ~78 MB of heap during a 1M-command import with the
	// earlier 10 minutes), hence not longer.
	EventDuplicateWindow = 2 * time.Minute
)

// EventSubject is the subject outcome events of calID are published on.
func EventSubject(calID string) string {
	if !actor.ValidCalendarID(calID) {
		return EventSubjectInvalid
	}
	return EventSubjectPrefix + calID
}

// EventBatchSubject is the subject of the event batch messages of
// partition p.
func EventBatchSubject(p int) string { return EventBatchSubjectPrefix + strconv.Itoa(p) }

// DefaultEventsMaxAge is how long the event stream keeps outcome events by
// default. Events are notifications derived from the command stream, not
// history: a consumer that was away longer reads the state from the API
// (or an index rebuilt from the commands) instead.
const DefaultEventsMaxAge = 30 * 24 * time.Hour

// EventStreamConfig is the configuration of the outcome event stream,
// without its retention (see DefaultEventsMaxAge).
func EventStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        EventStreamName,
		Description: "bookline outcome events (accepted / rejected / cancelled), one per decided command, alone or in batches",
		// The batch subjects are there whether or not --event-batches is
		// on, so that turning it on or off needs no change of the stream.
		Subjects:   []string{EventSubjectPrefix + "*", EventSubjectInvalid, EventBatchSubjectPrefix + "*"},
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		Duplicates: EventDuplicateWindow,
		Replicas:   replicas,
	}
}

// eventPublisher drains the index's event outbox to the event stream. It
// runs beside the writers, never on their path: a slow or absent event
// stream delays events, never bookings.
type eventPublisher struct {
	js    jetstream.JetStream
	store *data.Store
	log   *slog.Logger
	kick  chan struct{}
	// failed, when set, is told the reason of every failed drain (metrics).
	failed func(reason string)
	// storage, when set, is told when deleting published events from the
	// outbox fails, and works again, for storage reasons (storage.go).
	storage *storageFaults
	// logSync, when set, makes the acknowledged events durable in the
	// event stream before their outbox entries are deleted: otherwise a
	// power loss could take both.
	logSync *logSync
	// published holds the events JetStream acknowledged whose outbox
	// entries are not deleted yet: deletions are batched (see
	// flushDeletes), and drains skip these meanwhile.
	published  map[uint64]struct{}
	lastDelete time.Time
	// deleting is the answer of the deletion being committed, of the
	// events deletingSeqs (see flushDeletes).
	deleting     <-chan error
	deletingSeqs []uint64
	// newestAck is the event stream's highest sequence acknowledged to
	// this publisher: a sync must cover it before deletions.
	newestAck uint64
	// asideDone is set once no events of earlier stream incarnations are
	// left (see drainAside).
	asideDone bool
	// cluster, when set, limits publishing to the partitions this
	// instance consumes (progress.go); held are the queued events of the
	// other partitions not yet confirmed published (seq -> partition).
	cluster *eventsCluster
	held    map[uint64]int
	// paused stops publishing (tests: an instance cut off from the event
	// stream while it keeps deciding).
	paused atomic.Bool
	// acks receives the event stream's acknowledgements.
	acks *eventAcks
	// work, when set, counts the events published (memoryReleaser); idle
	// is set while the publisher waits with nothing left to publish.
	work *atomic.Uint64
	idle atomic.Bool
	// msgIDPrefix caches EventMsgID's prefix of the identity it was made
	// from.
	msgIDIdentity, msgIDPrefix string
	// batches publishes the events of a drain whose partition is known
	// as one message per partition (--event-batches; eventbatch.go), of
	// the command stream's partitions.
	batches    bool
	partitions int
	// batchesRefused is when batches may be tried again after the event
	// stream refused their subject (refuseBatches).
	batchesRefused time.Time
}

// eventsCluster is what the publisher needs in cluster mode.
type eventsCluster struct {
	parts    []*Partition
	progress *progress
}

// sort decides, per event, in cluster mode: publish it (its partition is
// consumed here, or its calendar is unknown), drop it (another instance
// published it), or hold it (not confirmed yet; this instance sends it if
// it comes to own the partition first).
func (c *eventsCluster) sort(ev data.Event) (publish, drop bool, part int) {
	if part = eventPartition(ev, len(c.parts)); part < 0 {
		return true, false, -1 // no partition known: sent by whoever has it (same id everywhere)
	}
	if c.parts[part].active.Load() {
		return true, false, part
	}
	return false, ev.Seq <= c.progress.eventsDone(part), part
}

// eventPartition is the partition of the writer that decided ev, or -1
// when it is not known: no calendar, or an event of an earlier command
// stream incarnation, whose partition count may have differed.
func eventPartition(ev data.Event, partitions int) int {
	if ev.Calendar == "" || ev.Stream != "" || partitions < 1 {
		return -1
	}
	return PartitionOf(ev.Calendar, partitions)
}

// Deleting published events from the outbox needs a sync of the event
// stream first (with the default --sync always), and every sync forces a
// journal commit of the file system: at one per drain the event stream
// doubled the syncs of the write path. The deletions wait instead until
// deleteBatch events or deleteEvery have gathered. What they cost: events
// of up to deleteEvery are published again after a crash, which the event
// stream's dedupe window absorbs (and consumers dedupe by id).
const (
	deleteBatch = 4096
	deleteEvery = 250 * time.Millisecond
)

func newEventPublisher(js jetstream.JetStream, store *data.Store, log *slog.Logger) *eventPublisher {
	return &eventPublisher{js: js, store: store, log: log.With("component", "events"), kick: make(chan struct{}, 1),
		published: make(map[uint64]struct{}), held: make(map[uint64]int), acks: newEventAcks(js.Conn())}
}

// notify tells the publisher that new events were committed.
func (e *eventPublisher) notify() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

const eventBatch = 1024

// eventsSource names the event publisher among the sources of storage
// faults.
const eventsSource = "event publisher"

func (e *eventPublisher) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	defer e.storage.clear(eventsSource, "") // stopped: it no longer fails
	backoff := 100 * time.Millisecond
	var flush <-chan time.Time // set while deletions wait
	for {
		e.idle.Store(false)
		n, err := e.drainOnce(ctx)
		if e.work != nil {
			e.work.Add(uint64(n))
		}
		if err == nil {
			err = e.flushDeletes(false)
		}
		flush = nil
		if len(e.published) > 0 {
			flush = time.After(max(0, time.Until(e.lastDelete.Add(deleteEvery))))
		}
		switch {
		case err != nil && ctx.Err() == nil && !errors.Is(err, data.ErrClosed):
			e.log.Warn("publishing outcome events", "err", err)
			if e.failed != nil {
				e.failed(EventFailureReason(err))
			}
			wait := backoff
			if e.storage.fail(eventsSource, err) {
				// Its retry is what tells that the disk has room again.
				wait = min(backoff, storageRetryMax)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		case n == eventBatch:
			continue // more queued
		}
		backoff = 100 * time.Millisecond
		e.idle.Store(true) // nothing queued was left (the memory releaser's sign)
		select {
		case <-ctx.Done():
			// Published events not deleted yet are published again
			// after the restart (same ids).
			return
		case <-e.kick:
		case <-tick.C:
		case <-flush:
			if err := e.flushDeletes(true); err != nil && !errors.Is(err, data.ErrClosed) {
				e.log.Warn("deleting published outcome events", "err", err)
				e.storage.fail(eventsSource, err)
			}
		}
	}
}

// flushDeletes deletes the published events from the outbox, once their
// event stream is durable, when enough have gathered or force is set. The
// deletion is committed in the background: waiting for it (behind the
// writers' large commits during an import, and the event stream's sync)
// held the publisher up for most of its time, and the events of an import
// were sent long after it ended. One deletion is in flight at a time; its
// events stay in published (skipped by the drains) until it is committed.
// force waits for the one in flight before it starts the next.
func (e *eventPublisher) flushDeletes(force bool) error {
	if e.deleting != nil {
		var err error
		if force {
			err = e.store.Await(e.deleting)
		} else {
			select {
			case err = <-e.deleting:
			default:
				return nil
			}
		}
		e.deleting = nil
		if err != nil {
			return err // its events are deleted with the next ones
		}
		e.storage.clear(eventsSource, "")
		for _, seq := range e.deletingSeqs {
			delete(e.published, seq)
		}
		e.deletingSeqs = e.deletingSeqs[:0]
		if force {
			force = len(e.published) > 0
		}
	}
	if len(e.published) == 0 || !force && len(e.published) < deleteBatch && time.Since(e.lastDelete) < deleteEvery {
		return nil
	}
	seqs := e.deletingSeqs[:0]
	for seq := range e.published {
		seqs = append(seqs, seq)
	}
	var durable func() error
	if e.logSync != nil {
		durable = e.logSync.RequestSeq(e.newestAck)
	}
	e.lastDelete = time.Now()
	e.deletingSeqs = seqs
	e.deleting = e.store.CommitDurableAsync(durable, func(tx *data.Tx) error { return tx.DeleteEvents(seqs) })
	return nil
}

// drainOnce publishes up to one batch of queued events and deletes the ones
// JetStream acknowledged.
func (e *eventPublisher) drainOnce(ctx context.Context) (int, error) {
	if e.paused.Load() {
		return 0, nil
	}
	if !e.asideDone {
		if err := e.drainAside(ctx); err != nil {
			return 0, err
		}
	}
	var (
		evs      []data.Event
		identity string
	)
	skip := e.skipped()
	if err := e.store.View(func(tx *data.Tx) (err error) {
		identity = tx.StreamIdentity()
		evs, err = tx.PendingEventsExcept(eventBatch, skip)
		return err
	}); err != nil || len(evs) == 0 {
		return 0, err
	}
	if e.cluster != nil {
		n := len(evs)
		if evs = e.sortForCluster(evs); len(evs) == 0 {
			return n, nil
		}
	}
	msgs, of, ends := e.outboxMsgs(evs, identity)
	round, err := e.acks.start(len(msgs))
	if err != nil {
		return 0, err
	}
	var firstErr error
	for i, m := range msgs {
		if m == nil {
			e.acks.settle(round, i, 0, nil)
			continue
		}
		m.Reply = e.acks.reply(round, i)
		if err := e.js.Conn().PublishMsg(m); err != nil {
			firstErr = err
			for j := i; j < len(msgs); j++ {
				e.acks.settle(round, j, 0, err)
			}
			break
		}
	}
	var done []uint64
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
	select {
	case <-round.done:
	case <-wait.C:
	case <-ctx.Done():
	}
	e.acks.mu.Lock()
	// An entry is published when every message that carries (some of)
	// it is: message i carries the entries of[ends[i-1]:ends[i]].
	failed := make([]bool, len(evs))
	from := 0
	for i := range msgs {
		err := round.res[i]
		if !round.acked[i] {
			err = errors.New("timed out waiting for event acks")
		}
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			for _, j := range of[from:ends[i]] {
				failed[j] = true
			}
			if msgs[i] != nil && errors.Is(err, jetstream.ErrNoStreamResponse) && strings.HasPrefix(msgs[i].Subject, EventBatchSubjectPrefix) {
				e.refuseBatches()
			}
		}
		from = ends[i]
	}
	for i, ev := range evs {
		if !failed[i] {
			done = append(done, ev.Seq)
		}
	}
	e.newestAck = max(e.newestAck, round.newest)
	e.acks.mu.Unlock()
	for _, seq := range done {
		e.published[seq] = struct{}{}
	}
	if e.cluster != nil {
		e.confirm(ctx, evs)
	}
	if firstErr != nil {
		return len(done), fmt.Errorf("event stream: %w", firstErr)
	}
	return len(done), nil
}

// skipped is what drainOnce must not read from the outbox again: the
// events published (and not yet deleted) and, in cluster mode, those held
// for another instance. Held events come back once their partition is
// consumed here or their watermark passed them.
func (e *eventPublisher) skipped() map[uint64]struct{} {
	if e.cluster == nil || len(e.held) == 0 {
		return e.published
	}
	for seq, part := range e.held {
		if e.cluster.parts[part].active.Load() || seq <= e.cluster.progress.eventsDone(part) {
			delete(e.held, seq)
		}
	}
	skip := make(map[uint64]struct{}, len(e.published)+len(e.held))
	for seq := range e.published {
		skip[seq] = struct{}{}
	}
	for seq := range e.held {
		skip[seq] = struct{}{}
	}
	return skip
}

// sortForCluster keeps the events of evs this instance publishes now
// (eventsCluster.sort): an event another instance published is dropped
// (deleted with the published ones), and one not confirmed yet is held,
// to be sent here if this instance comes to own its partition first.
func (e *eventPublisher) sortForCluster(evs []data.Event) []data.Event {
	keep := evs[:0]
	for _, ev := range evs {
		switch publish, drop, part := e.cluster.sort(ev); {
		case publish:
			keep = append(keep, ev)
		case drop:
			e.published[ev.Seq] = struct{}{} // deleted with the published ones
		default:
			e.held[ev.Seq] = part
		}
	}
	return keep
}

// confirm raises the event watermark of each partition of evs (in
// sequence order) to its last event before the first one not published.
func (e *eventPublisher) confirm(ctx context.Context, evs []data.Event) {
	upTo := map[int]uint64{}
	blocked := map[int]bool{}
	for _, ev := range evs {
		_, _, part := e.cluster.sort(ev)
		if part < 0 || blocked[part] {
			continue
		}
		if _, ok := e.published[ev.Seq]; ok {
			upTo[part] = ev.Seq
		} else {
			blocked[part] = true
		}
	}
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for part, seq := range upTo {
		if err := e.cluster.progress.confirmEvents(c, part, seq); err != nil {
			// A lagging watermark only makes a next owner send again
			// (same ids, deduplicated).
			e.log.Warn("recording published events", "partition", part, "err", err)
		}
	}
}

// Header values every event carries, shared by their messages (nats.go
// only reads them).
var (
	schemaHeader      = []string{strconv.Itoa(actor.SchemaVersion)}
	jsonHeader        = []string{"application/json"}
	eventStreamHeader = []string{EventStreamName}
)

// EventMsgID is the Nats-Msg-Id of the outcome event of the command at
// stream sequence seq of the command stream incarnation identity
// (BOOKLINE_CMD@<creation time>): evt-<creation time in Unix
// nanoseconds>-<seq>. Sequences start at 1 again in a stream that was
// deleted and created again; the creation time tells the two apart, for
// JetStream's dedupe window and for consumers that dedupe by id.
func EventMsgID(identity string, seq uint64) string {
	return eventMsgIDPrefix(identity) + strconv.FormatUint(seq, 10)
}

// eventMsgIDPrefix is EventMsgID without the sequence.
func eventMsgIDPrefix(identity string) string {
	_, created, ok := strings.Cut(identity, "@")
	t, err := time.Parse(time.RFC3339Nano, created)
	if !ok || err != nil {
		return "evt-" // no identity known: cannot happen once the index was reconciled
	}
	return "evt-" + strconv.FormatInt(t.UnixNano(), 10) + "-"
}

// drainAside publishes the events of earlier command stream incarnations
// that were set aside when the index moved to a new stream (see
// reconcileIndex), each under its own incarnation's identity, and deletes
// them once the event stream has them. They are rare (what was unpublished
// at that one restart), so they go one batch at a time, before the rest.
func (e *eventPublisher) drainAside(ctx context.Context) error {
	for {
		var evs []data.Event
		if err := e.store.View(func(tx *data.Tx) (err error) {
			evs, err = tx.AsideEvents(eventBatch)
			return err
		}); err != nil {
			return err
		}
		if len(evs) == 0 {
			e.asideDone = true
			return nil
		}
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		for _, ev := range evs {
			ms, err := e.eventMsgs(ev, ev.Stream)
			if err != nil {
				continue
			}
			for _, m := range ms {
				// eventMsgs sets the expected stream.
				if _, err := e.js.PublishMsg(wait, m); err != nil {
					cancel()
					return fmt.Errorf("event stream: %w", err)
				}
			}
		}
		cancel()
		var durable func() error
		if e.logSync != nil {
			durable = e.logSync.Request()
		}
		if err := e.store.CommitDurable(durable, func(tx *data.Tx) error { return tx.DeleteAsideEvents(evs) }); err != nil {
			return err
		}
	}
}

// ensureEventStream creates the event stream, or brings the settings
// bookline manages (retention, dedupe window, subjects, description) of
// the existing one to cfg's; its replicas are checked against rp, never
// changed.
func ensureEventStream(ctx context.Context, js jetstream.JetStream, maxAge time.Duration, rp replicaPolicy) (jetstream.Stream, error) {
	cfg := EventStreamConfig(rp.want)
	switch {
	case maxAge == 0:
		cfg.MaxAge = DefaultEventsMaxAge
	case maxAge > 0:
		cfg.MaxAge = maxAge
	}
	s, err := ensureStreamExists(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	if err := rp.check("stream", EventStreamName, s.CachedInfo().Config.Replicas); err != nil {
		return nil, err
	}
	managed := func(c jetstream.StreamConfig) jetstream.StreamConfig {
		c.MaxAge, c.Duplicates, c.Subjects, c.Description = cfg.MaxAge, cfg.Duplicates, cfg.Subjects, cfg.Description
		return c
	}
	if have := s.CachedInfo().Config; reflect.DeepEqual(have, managed(have)) {
		return s, nil
	}
	return retryJS(ctx, "the settings of stream "+EventStreamName, func(ctx context.Context) (jetstream.Stream, error) {
		s, err := js.Stream(ctx, EventStreamName)
		if err != nil {
			return nil, err
		}
		have := s.CachedInfo().Config
		if want := managed(have); !reflect.DeepEqual(have, want) {
			return js.UpdateStream(ctx, want)
		}
		return s, nil // another instance updated it
	})
}
