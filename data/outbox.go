package data

import (
	"encoding/binary"
	"encoding/json"
)

// The event outbox: every decided command leaves an outcome event here, in
// the same transaction as the decision. A publisher outside the writers'
// path sends the events to NATS and deletes them once JetStream has them,
// so an event is never lost to a crash and never delays a reply.

var bucketEvents = []byte("events") // stream seq (8) -> Event JSON

// Event is one pending outcome event.
type Event struct {
	Seq uint64 `json:"seq"`
	// Calendar is the calendar token of the command's subject.
	Calendar string          `json:"calendar"`
	Payload  json.RawMessage `json:"payload"`
}

func seqKey(seq uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	return b[:]
}

// PutEvent queues the outcome event of the command at stream sequence seq.
func (t *Tx) PutEvent(ev Event) error {
	b, err := t.tx.CreateBucketIfNotExists(bucketEvents)
	if err != nil {
		return err
	}
	v, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return b.Put(seqKey(ev.Seq), v)
}

// PendingEvents returns up to max queued events in sequence order.
func (t *Tx) PendingEvents(max int) ([]Event, error) {
	b := t.tx.Bucket(bucketEvents)
	if b == nil {
		return nil, nil
	}
	var out []Event
	c := b.Cursor()
	for k, v := c.First(); k != nil && len(out) < max; k, v = c.Next() {
		var ev Event
		if err := json.Unmarshal(v, &ev); err != nil {
			return nil, err
		}
		out = append(out, ev)
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
