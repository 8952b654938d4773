package queue

import (
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// outboxMsgs are the messages of the outbox entries evs, in order: one
// per event, or with batches on (eventbatch.go) the events of each
// partition in a few messages. An entry may hold the events of several
// calendars (actor.EventParts), and a batch the events of many entries:
// message i carries the entries whose indexes in evs are
// of[ends[i-1]:ends[i]] (from 0 for the first). An undecodable entry
// (eventMsgs logged it) has one nil message: it is dropped from the outbox
// with the published ones, never retried.
func (e *eventPublisher) outboxMsgs(evs []data.Event, identity string) (msgs []*nats.Msg, of, ends []int) {
	var b *eventBatcher
	if e.batching() {
		b = e.batcher(identity)
	}
	for i, ev := range evs {
		if b != nil && b.add(ev, i) {
			continue
		}
		ms, err := e.eventMsgs(ev, identity)
		if err != nil {
			ms = []*nats.Msg{nil}
		}
		for _, m := range ms {
			msgs, of = append(msgs, m), append(of, i)
			ends = append(ends, len(of))
		}
	}
	if b != nil {
		msgs, of, ends = b.finish(msgs, of, ends)
	}
	return msgs, of, ends
}

// eventMsgs are the messages of outcome event entry ev, decided from the
// command stream incarnation identity (ev.Stream when set): one, or one
// per part a collective.commits confirmed, each on its calendar's subject
// with the id EventMsgID followed by "." and its position from 1. An
// error means the entry cannot be decoded, which short of disk
// corruption cannot happen: it is logged and dropped rather than stall
// every event behind it.
func (e *eventPublisher) eventMsgs(ev data.Event, identity string) ([]*nats.Msg, error) {
	if ev.Stream != "" {
		identity = ev.Stream
	}
	parts, err := actor.EventParts(ev.Payload)
	if err != nil {
		e.log.Error("dropping undecodable outcome event", "seq", ev.Seq, "stream", identity, "err", err)
		return nil, err
	}
	seq := strconv.FormatUint(ev.Seq, 10)
	if identity != e.msgIDIdentity {
		e.msgIDIdentity, e.msgIDPrefix = identity, eventMsgIDPrefix(identity)
	}
	msgs := make([]*nats.Msg, len(parts))
	for i, part := range parts {
		cal, id := ev.Calendar, e.msgIDPrefix+seq
		m := &nats.Msg{Subject: EventSubject(cal), Data: part.JSON, Header: make(nats.Header, 7)}
		if part.Calendar != "" {
			n := strconv.Itoa(i + 1)
			cal, id = part.Calendar, id+"."+n
			m.Subject = EventSubject(cal)
			m.Header[HeaderEventPart] = []string{n}
		}
		m.Header[HeaderSchema] = schemaHeader
		m.Header[HeaderContentType] = jsonHeader
		m.Header[HeaderCommandSeq] = []string{seq}
		m.Header[HeaderCommandStream] = []string{identity}
		m.Header[jetstream.MsgIDHeader] = []string{id}
		m.Header[jetstream.ExpectedStreamHeader] = eventStreamHeader
		msgs[i] = m
	}
	return msgs, nil
}
