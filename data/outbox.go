package data

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// The event outbox: every decided command leaves an outcome event here, in
// the same transaction as the decision. A publisher outside the writers'
// path sends the events to NATS and deletes them once JetStream has them,
// so an event is never lost to a crash and never delays a reply.

var bucketEvents = []byte("events") // stream seq (8) -> calendar, payload (see PutEvent)

// Event is one pending outcome event.
type Event struct {
	Seq uint64
	// Calendar is the calendar token of the command's subject (at most
	// 255 bytes: subject tokens of commands are bounded by the writer).
	Calendar string
	Payload  json.RawMessage
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
	b, err := t.tx.CreateBucketIfNotExists(bucketEvents)
	if err != nil {
		return err
	}
	v := make([]byte, 0, 1+len(ev.Calendar)+len(ev.Payload))
	v = append(v, byte(len(ev.Calendar)))
	v = append(v, ev.Calendar...)
	return b.Put(seqKey(ev.Seq), append(v, ev.Payload...))
}

// PendingEvents returns up to max queued events in sequence order.
func (t *Tx) PendingEvents(max int) ([]Event, error) { return t.PendingEventsExcept(max, nil) }

// PendingEventsExcept is PendingEvents without the events whose sequence is
// in skip (published already, their deletion not yet committed).
func (t *Tx) PendingEventsExcept(max int, skip map[uint64]struct{}) ([]Event, error) {
	b := t.tx.Bucket(bucketEvents)
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
	b := t.tx.Bucket(bucketEvents)
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

// ClearEvents drops every queued event (used by replay, which must not
// announce history again).
func (t *Tx) ClearEvents() error {
	if t.tx.Bucket(bucketEvents) == nil {
		return nil
	}
	return t.tx.DeleteBucket(bucketEvents)
}
