package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The event outbox: every decided command leaves an outcome event here, in
// the same transaction as the decision. A publisher outside the writers'
// path sends the events to NATS and deletes them once JetStream has them,
// so an event is never lost to a crash and never delays a reply.

var (
	bucketEvents = []byte("events") // stream seq (8) -> calendar, payload (see PutEvent)
	// bucketEventsAside holds the events of an earlier incarnation of the
	// command stream that were not published when the index moved to a new
	// one: stream identity ++ 0 ++ seq (8) -> calendar, payload. Kept apart
	// so that the new incarnation's sequences, which start at 1 again,
	// neither overwrite them nor take their identity.
	bucketEventsAside = []byte("events.aside")
)

// Event is one pending outcome event.
type Event struct {
	Seq uint64
	// Stream is the identity of the command stream Seq belongs to when it
	// is not the one the index is built from now (see SetAsideEvents); ""
	// otherwise.
	Stream string
	// Calendar is the calendar token of the command's subject (at most
	// 255 bytes: subject tokens of commands are bounded by the writer).
	Calendar string
	// Payload is the command's reply: the event's content, rendered as
	// JSON when it is published.
	Payload BinaryReply
}

func seqKey(seq uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	return b[:]
}

// PutEvent queues the outcome event of the command at stream sequence seq.
// Stored as calendar length (1 byte), calendar, payload: no JSON on the
// writer's path.
func (t *Tx) PutEvent(ev Event) error {
	b, err := t.createBucket(bucketEvents)
	if err != nil {
		return err
	}
	v := make([]byte, 0, 1+len(ev.Calendar)+len(ev.Payload))
	v = append(v, byte(len(ev.Calendar)))
	v = append(v, ev.Calendar...)
	return b.Put(seqKey(ev.Seq), append(v, ev.Payload...))
}

// EventsAtLeast reports whether the outbox holds n events or more,
// walking at most n keys.
func (t *Tx) EventsAtLeast(n int) bool {
	if n <= 0 {
		return true
	}
	b := t.bucket(bucketEvents)
	if b == nil {
		return false
	}
	c, seen := b.Cursor(), 0
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if seen++; seen >= n {
			return true
		}
	}
	return false
}

// PendingEvents returns up to max queued events in sequence order.
func (t *Tx) PendingEvents(max int) ([]Event, error) { return t.PendingEventsExcept(max, nil) }

// PendingEventsExcept is PendingEvents without the events whose sequence is
// in skip (published already, their deletion not yet committed).
func (t *Tx) PendingEventsExcept(max int, skip map[uint64]struct{}) ([]Event, error) {
	b := t.bucket(bucketEvents)
	if b == nil {
		return nil, nil
	}
	var out []Event
	c := b.Cursor()
	for k, v := c.First(); k != nil && len(out) < max; k, v = c.Next() {
		seq := binary.BigEndian.Uint64(k)
		if _, ok := skip[seq]; ok {
			continue
		}
		if len(v) < 1 || len(v) < 1+int(v[0]) {
			return nil, fmt.Errorf("data: malformed event at seq %d", seq)
		}
		n := int(v[0])
		out = append(out, Event{Seq: seq, Calendar: string(v[1 : 1+n]), Payload: bytes.Clone(v[1+n:])})
	}
	return out, nil
}

// DeleteEvents removes published events.
func (t *Tx) DeleteEvents(seqs []uint64) error {
	b := t.bucket(bucketEvents)
	if b == nil {
		return nil
	}
	for _, s := range seqs {
		if err := b.Delete(seqKey(s)); err != nil {
			return err
		}
	}
	return nil
}

// SetAsideEvents moves every queued event to the events of an earlier
// stream incarnation, under identity (the stream they were decided from),
// before the index starts over from another stream. It returns how many
// it moved.
func (t *Tx) SetAsideEvents(identity string) (int, error) {
	b := t.bucket(bucketEvents)
	if b == nil {
		return 0, nil
	}
	aside, err := t.createBucket(bucketEventsAside)
	if err != nil {
		return 0, err
	}
	n := 0
	err = b.ForEach(func(k, v []byte) error {
		n++
		key := make([]byte, 0, len(identity)+1+len(k))
		key = append(append(append(key, identity...), 0), k...)
		return aside.Put(key, bytes.Clone(v))
	})
	if err != nil {
		return 0, err
	}
	return n, t.deleteBucket(bucketEvents)
}

// AsideEvents returns up to max events of earlier stream incarnations (see
// SetAsideEvents), each with its Stream set.
func (t *Tx) AsideEvents(max int) ([]Event, error) {
	b := t.bucket(bucketEventsAside)
	if b == nil {
		return nil, nil
	}
	var out []Event
	c := b.Cursor()
	for k, v := c.First(); k != nil && len(out) < max; k, v = c.Next() {
		i := bytes.IndexByte(k, 0)
		if i < 0 || len(k) != i+9 || len(v) < 1 || len(v) < 1+int(v[0]) {
			return nil, fmt.Errorf("data: malformed set-aside event %q", k)
		}
		n := int(v[0])
		out = append(out, Event{Seq: binary.BigEndian.Uint64(k[i+1:]), Stream: string(k[:i]),
			Calendar: string(v[1 : 1+n]), Payload: bytes.Clone(v[1+n:])})
	}
	return out, nil
}

// DeleteAsideEvents removes published events of earlier incarnations.
func (t *Tx) DeleteAsideEvents(evs []Event) error {
	b := t.bucket(bucketEventsAside)
	if b == nil {
		return nil
	}
	for _, ev := range evs {
		key := append(append([]byte(ev.Stream), 0), seqKey(ev.Seq)...)
		if err := b.Delete(key); err != nil {
			return err
		}
	}
	return nil
}
