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

// Catch-up in cluster mode: a partition applies what other instances
// decided (or what it has not yet applied) by reading the stream outside
// its durable consumer, checking first that the stream still holds the
// history its index applied.

// logMsg is a command read from the stream outside the durable consumer.
type logMsg struct {
	seq     uint64
	at      time.Time
	subject string
	header  nats.Header
	data    []byte
}

// catchUpDirect bounds how many messages a catch-up reads one by one (one
// request each) before it opens an ordered consumer for the rest.
const catchUpDirect = 32

// catchUpChunk is how many commands one catch-up transaction applies.
const catchUpChunk = 4096

// catchUp applies the partition's messages after the index's applied
// sequence up to stream sequence to, read from the stream. Only the
// partition's goroutine calls it (one writer per partition and index).
//
// Messages at or below the consumer's ack floor were decided, answered and
// announced by the instance that acknowledged them: they are applied like a
// replay (actor.ApplyReplay: no events, no replies). Messages above it may
// not have been decided by anyone yet (the owner may have died holding
// them): they are decided normally, with their outcome events and replies.
// Deciding one twice is harmless: apply is deterministic, so the second
// reply is identical to the first, and events carry one Nats-Msg-Id per
// command (EventMsgID).
func (p *Partition) catchUp(ctx context.Context, to uint64, why string) error {
	from := p.applied.Load()
	if to <= from {
		if why == "assigned" {
			// About to decide on top of what the index applied: the
			// stream must still hold it (checked however little is new).
			sinfo, err := p.cluster.stream.Info(ctx)
			if err != nil {
				return fmt.Errorf("queue: stream info: %w", err)
			}
			if err := p.checkApplied(ctx, sinfo); err != nil {
				return err
			}
		}
		p.caughtUp.Store(true)
		return nil
	}
	began := time.Now()
	// Reading from from+1 on, the stream starts at the first message it
	// has without a word.
	sinfo, err := p.cluster.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("queue: stream info: %w", err)
	}
	if err := historyGap(p.ID, max(from, p.horizon.Load()), firstSeq(sinfo)); err != nil {
		return err
	}
	if err := p.checkApplied(ctx, sinfo); err != nil {
		return err
	}
	info, err := p.cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("queue: consumer info: %w", err)
	}
	floor := info.AckFloor.Stream
	var applied, decided int
	flush := func(msgs []logMsg) error {
		n, err := p.applyLog(msgs, floor)
		applied += len(msgs)
		decided += n
		return err
	}
	filter := partitionFilter(p.ID)
	var msgs []logMsg
	next := from + 1
	for i := 0; i < catchUpDirect && next <= to; i++ {
		m, err := p.cluster.stream.GetMsg(ctx, next, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			next = to + 1
			break
		}
		if err != nil {
			return fmt.Errorf("queue: catch up partition %d at seq %d: %w", p.ID, next, err)
		}
		if m.Sequence > to {
			next = to + 1
			break
		}
		msgs = append(msgs, logMsg{seq: m.Sequence, at: m.Time, subject: m.Subject, header: m.Header, data: m.Data})
		next = m.Sequence + 1
	}
	if next <= to {
		if err := p.readLog(ctx, next, to, &msgs, flush); err != nil {
			return err
		}
	}
	if err := flush(msgs); err != nil {
		return err
	}
	p.caughtUp.Store(true)
	lvl := p.log.Info
	if why == "read" {
		lvl = p.log.Debug
	}
	lvl("partition caught up from the stream", "reason", why, "from_seq", from, "to_seq", to, "ack_floor", floor,
		"applied", applied, "decided", decided, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// checkApplied makes sure the stream still holds, at the partition's
// applied sequence, the message the index applied there, before anything
// read after it is applied: a stream leader whose history differs (a
// node's damaged or truncated files, Jepsen's split brain) would
// otherwise be followed. One request; on a difference the whole recorded
// history is compared to name the first differing sequence.
func (p *Partition) checkApplied(ctx context.Context, info *jetstream.StreamInfo) error {
	var head data.ChainHead
	if err := p.store.View(func(tx *data.Tx) error { head = tx.ChainHead(p.ID); return nil }); err != nil {
		return err
	}
	if head.Seq == 0 || head.Seq < firstSeq(info) {
		return nil
	}
	if head.Seq > info.State.LastSeq {
		// Perhaps a deposed leader's stale answer: asked again, as at
		// the start (streamInfoNotBehind).
		var err error
		if info, err = streamInfoNotBehind(ctx, p.cluster.stream, streamIdentity(info), map[int]uint64{p.ID: head.Seq}); err != nil {
			return err
		}
	}
	what, err := messageDiffers(ctx, p.cluster.stream, p.ID, head.Seq, info.State.LastSeq, head.Hash)
	if err != nil || what == "" {
		return err
	}
	var hist data.History
	if err := p.store.View(func(tx *data.Tx) (err error) { hist, err = tx.History(p.ID); return err }); err != nil {
		return err
	}
	e, err := checkHistory(ctx, p.cluster.stream, info, p.ID, hist)
	if err != nil {
		return err
	}
	if e == nil { // the stream changed again meanwhile
		e = &HistoryMismatchError{Partition: p.ID, Seq: head.Seq, What: what, Applied: head.Seq, Tail: true}
	}
	return e
}

// readLog reads the partition's messages from seq from up to to with an
// ordered consumer, flushing full chunks.
func (p *Partition) readLog(ctx context.Context, from, to uint64, msgs *[]logMsg, flush func([]logMsg) error) error {
	oc, err := p.js.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{partitionFilter(p.ID)},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
	})
	if err != nil {
		return fmt.Errorf("queue: catch-up consumer: %w", err)
	}
	it, err := oc.Messages(jetstream.PullMaxMessages(2 * catchUpChunk))
	if err != nil {
		return fmt.Errorf("queue: catch-up consumer: %w", err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("queue: catch up partition %d: %w", p.ID, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		seq := meta.Sequence.Stream
		if seq > to {
			return nil
		}
		*msgs = append(*msgs, logMsg{seq: seq, at: meta.Timestamp, subject: m.Subject(), header: m.Headers(), data: m.Data()})
		if len(*msgs) >= catchUpChunk {
			if err := flush(*msgs); err != nil {
				return err
			}
			*msgs = (*msgs)[:0]
		}
		if seq == to || meta.NumPending == 0 {
			return nil
		}
	}
}

// applyLog applies msgs (all above the applied sequence, in order) in one
// group commit: those at or below floor as a replay, the rest decided with
// events and replies. It returns how many were decided. At a command of a
// newer schema it stops: what came before is applied and answered, and it
// returns the *actor.NewerSchemaError.
func (p *Partition) applyLog(msgs []logMsg, floor uint64) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	in := make([]actor.Decoded, len(msgs))
	split := len(msgs)
	for i, m := range msgs {
		in[i] = actor.Decode(actor.Input{Seq: m.seq, At: m.at, SubjectCalendar: calendarOfStoredSubject(m.subject),
			Schema: m.header.Get(HeaderSchema), Data: m.data, Partitions: p.sys.n})
		if m.seq > floor && split == len(msgs) {
			split = i
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := p.sys.mark(ctx, in, storeLevel(p.store, p.ID))
	cancel()
	if err != nil {
		return 0, err
	}
	var (
		out  []actor.Output
		held error
	)
	err = p.store.Commit(func(tx *data.Tx) error {
		out, held = nil, nil
		if split > 0 {
			// Decided and answered by another instance, which may have
			// died before sending the side effects: they are queued here
			// too, and sent if this instance owns the partition (or
			// comes to own it) before they are confirmed done.
			var eventsAfter uint64
			if p.cluster.progress != nil {
				eventsAfter = p.cluster.progress.eventsDone(p.ID)
			}
			replayed, err := actor.ApplyTakeover(tx, p.ID, in[:split], eventsAfter)
			if err != nil {
				return err
			}
			if held = actor.Held(replayed, in[:split]); held != nil {
				return nil
			}
		}
		if split < len(in) {
			var err error
			out, err = actor.ApplyDeferred(tx, p.ID, in[split:])
			held = actor.Held(out, in[split:])
			return err
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	applied := msgs[len(msgs)-1].seq
	if e, ok := held.(*actor.NewerSchemaError); ok {
		applied = 0
		for _, m := range msgs {
			if m.seq < e.Seq {
				applied = m.seq
			}
		}
	}
	if applied > 0 {
		p.applied.Store(applied)
	}
	if len(out) == 0 {
		return 0, held
	}
	if err := actor.Render(out); err != nil {
		return 0, err
	}
	if p.committed != nil {
		p.committed()
	}
	decided := 0
	for i, o := range out {
		if o.Held {
			break
		}
		decided++
		hdr := msgs[split+i].header
		to := hdr.Get(HeaderReplyTo)
		if o.Reply == nil || !ValidReplySubject(to) {
			continue
		}
		p.sendReply(hdr, to, o)
	}
	p.flushReplies()
	return decided, held
}
