package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// A writer's batches: taken from the consumer, submitted to the store's
// group commit, then answered (replies, acks) in order once committed.

// submitBatch submits first and what else has arrived, up to MaxBatch, to
// the store (in cluster mode after closing the gaps before it).
func (p *Partition) submitBatch(ctx context.Context, first jetstream.Msg, msgs chan jetstream.Msg, q *flightQueue) error {
	batch := make([]jetstream.Msg, 1, min(MaxBatch, len(msgs)+1))
	batch[0] = first
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
	b, err := p.submit(batch)
	if err != nil {
		return err
	}
	q.flight = append(q.flight, b)
	return nil
}

// flightQueue holds a partition's batches submitted to the store and not
// yet answered, oldest first, and counts the messages answered since the
// writer started, to tell when it has caught up with its backlog.
type flightQueue struct {
	p       *Partition
	flight  []*inFlight
	seen    uint64 // messages handled since start, for catch-up
	backlog uint64 // messages the stream held for the partition at start
}

// finishHead answers the oldest batch, whose commit ended with err.
func (q *flightQueue) finishHead(err error) error {
	p, b := q.p, q.flight[0]
	q.flight[0] = nil
	q.flight = q.flight[1:]
	if err != nil {
		return err
	}
	if err := p.finish(b); err != nil {
		return err
	}
	q.seen += uint64(len(b.msgs))
	if !p.caughtUp.Load() && q.seen >= q.backlog {
		p.caughtUp.Store(true)
		p.log.Info("partition caught up", "applied_seq", p.applied.Load(), "replayed", q.seen)
	}
	return nil
}

// drain answers every batch in flight (on the way out or before a
// catch-up); the first error stops it.
func (q *flightQueue) drain() error {
	for len(q.flight) > 0 {
		if err := q.finishHead(q.p.store.Await(q.flight[0].done)); err != nil {
			return err
		}
	}
	return nil
}

// maxBatchesInFlight bounds the batches one partition has submitted to the
// store and not yet answered (embedded mode).
const maxBatchesInFlight = 4

// inFlight is a batch submitted to the store's group commit.
type inFlight struct {
	msgs []jetstream.Msg
	in   []actor.Decoded
	out  *[]actor.Output // set by the commit function
	done <-chan error    // the commit's answer
}

// errPredecessorLost is what a batch's commit function returns when the
// batch submitted before it was not applied (its commit failed): the
// partition starts over from the index's applied sequence.
var errPredecessorLost = errors.New("queue: the previous batch of the partition was not applied")

// submit decodes the batch (in this goroutine, in parallel with the other
// partitions) and hands it to the store's next group commit without waiting
// for it. Its messages are in the stream's files already (see logsync.go):
// the sync that covers them is requested first, runs while the batch is
// decoded and decided, and the batch is answered only once it returned.
func (p *Partition) submit(batch []jetstream.Msg) (*inFlight, error) {
	var durable func() error
	if p.logSync != nil {
		// The newest message of the batch is all a sync must cover: the
		// stream holds every earlier one in its files before it.
		var newest uint64
		if meta, err := batch[len(batch)-1].Metadata(); err == nil {
			newest = meta.Sequence.Stream
		}
		durable = p.logSync.RequestSeq(newest)
	}
	in := make([]actor.Decoded, len(batch))
	var last uint64
	for i, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			return nil, fmt.Errorf("queue: message metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		last = seq
		in[i] = actor.Decode(actor.Input{
			Seq:             seq,
			At:              meta.Timestamp,
			SubjectCalendar: calendarOfStoredSubject(m.Subject()),
			Schema:          m.Headers().Get(HeaderSchema),
			Data:            m.Data(),
			Partitions:      p.sys.n,
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := p.sys.mark(ctx, in, storeLevel(p.store, p.ID))
	cancel()
	if err != nil {
		return nil, err
	}
	// The batch before this one ended at p.submitted; if its commit
	// failed, this one must not be applied on top of the gap.
	prev := p.submitted
	p.submitted = max(p.submitted, last)
	out := new([]actor.Output)
	done := p.store.CommitDurableAsync(durable, func(tx *data.Tx) error {
		if prev > 0 && tx.AppliedSeq(p.ID) < prev {
			return errPredecessorLost
		}
		var err error
		*out, err = actor.ApplyDeferred(tx, p.ID, in)
		return err
	})
	return &inFlight{msgs: batch, in: in, out: out, done: done}, nil
}

// finish answers a committed batch: replies to every command that asked for
// one, then acks the batch up to its last applied message. A batch that
// apply held at a command of a newer schema returns its
// *actor.NewerSchemaError once the messages before it are answered.
func (p *Partition) finish(b *inFlight) error {
	batch, in, out := b.msgs, b.in, *b.out
	// JSON for the replies is encoded here, after the commit, in this
	// partition's goroutine: not inside the transaction all partitions share.
	if err := actor.Render(out); err != nil {
		return err
	}
	if p.committed != nil {
		p.committed()
	}
	last := -1 // the last message applied or skipped: acknowledged
	for i, o := range out {
		if o.Held {
			break
		}
		last = i
		if !o.Skipped {
			p.applied.Store(o.Seq)
		}
		if in[i].Reject != nil {
			p.log.Info("command rejected", "seq", o.Seq, "code", in[i].Reject.Code, "message", in[i].Reject.Message,
				"request_id", batch[i].Headers().Get(HeaderRequestID), "trace_id", batch[i].Headers().Get(HeaderTraceID))
		}
		if !o.Skipped && o.OperatorSkip != nil {
			p.auditSkip(o, batch[i].Subject(), batch[i].Headers())
		}
		hdr := batch[i].Headers()
		to := hdr.Get(HeaderReplyTo)
		if o.Reply == nil || !ValidReplySubject(to) {
			continue
		}
		if p.local != nil && p.local(to, o.Reply) {
			continue
		}
		p.sendReply(hdr, to, o)
	}
	p.flushReplies()
	// AckAll: acknowledging the last message acknowledges the batch. A
	// held message and those after it are not acknowledged.
	if last >= 0 {
		if err := batch[last].Ack(); err != nil {
			p.log.Warn("ack", "err", err)
		}
	}
	if p.work != nil {
		p.work.Add(uint64(last + 1))
	}
	p.finished++
	p.storage.clear(p.storageSrc, "") // it committed
	if p.observe != nil {
		// Last, so that its time covers the replies and the acknowledgement.
		p.observe(p.ID, in, out, time.Now())
	}
	return actor.Held(out, in)
}

// sendReply answers a decided command at to: in a reply batch when the
// command asked for one (sent by flushReplies), else in a message of its
// own.
func (p *Partition) sendReply(hdr nats.Header, to string, o actor.Output) {
	if bulk := hdr.Get(HeaderReplyBatch); bulk != "" && p.replies.add(p.nc, bulk, to, o.Reply) {
		return
	}
	if err := p.nc.Publish(to, o.Reply); err != nil {
		p.log.Warn("reply", "seq", o.Seq, "err", err)
	}
}

// flushReplies sends the reply batches sendReply filled.
func (p *Partition) flushReplies() {
	if err := p.replies.flush(p.nc); err != nil {
		p.log.Warn("replies", "err", err)
	}
}
