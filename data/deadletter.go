package data

import (
	"bytes"
	"time"
)

// Dead letters: mirror operations that the external calendar refused
// several times for
// reasons of their own (not of the link), set aside so that the
// calendar's other operations go on. Like the outbox they are the
// calendar sync's bookkeeping, not derived from the log: replay neither
// fills nor clears them. An admin retries (back to the outbox) or drops
// them.

var bucketSyncDead = []byte("gsyncdead") // as gsync -> reason, time, attempts, entry

const deadVersion = 1

// DeadLetter is a set-aside mirror operation.
type DeadLetter struct {
	Entry    SyncEntry
	Reason   string
	Attempts int
	At       time.Time // when it was set aside
}

// PutDeadLetter moves entry d.Entry from the outbox to the dead letters.
func (t *Tx) PutDeadLetter(d DeadLetter) error {
	b, err := t.createBucket(bucketSyncDead)
	if err != nil {
		return err
	}
	v := []byte{deadVersion}
	v = AppendString(v, d.Reason)
	v = AppendTime(v, d.At)
	v = append(v, byte(min(d.Attempts, 255)))
	v = append(v, encodeSync(&d.Entry)...)
	if err := b.Put(syncSubKey(d.Entry.Calendar, d.Entry.Seq, d.Entry.Sub), v); err != nil {
		return err
	}
	return t.DeleteSyncEntries([]SyncEntry{d.Entry})
}

func decodeDead(k, v []byte) (DeadLetter, error) {
	var d DeadLetter
	r := NewReader(v)
	if r.Byte() != deadVersion {
		return d, ErrCorrupt
	}
	d.Reason = r.String()
	d.At = r.Time()
	d.Attempts = int(r.Byte())
	if err := r.Err(); err != nil {
		return d, err
	}
	e, err := decodeSync(k, r.b)
	d.Entry = e
	return d, err
}

// DeadLetters lists calendar cal's dead letters in sequence order, up to
// max.
func (t *Tx) DeadLetters(cal string, max int) ([]DeadLetter, error) {
	return t.DeadLettersAfter(cal, 0, 0, max)
}

// DeadLettersAfter lists up to max of calendar cal's dead letters that
// come after the one of sequence seq (and sub) in sequence order: a page
// that starts where a previous one ended (seq 0: from the first).
func (t *Tx) DeadLettersAfter(cal string, seq uint64, sub uint32, max int) ([]DeadLetter, error) {
	b := t.bucket(bucketSyncDead)
	if b == nil {
		return nil, nil
	}
	prefix := append([]byte(cal), 0)
	var out []DeadLetter
	c := b.Cursor()
	k, v := c.Seek(prefix)
	if seq != 0 {
		after := syncSubKey(cal, seq, sub)
		if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
			k, v = c.Next()
		}
	}
	for ; k != nil && bytes.HasPrefix(k, prefix) && len(out) < max; k, v = c.Next() {
		d, err := decodeDead(k, v)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// DeadLetterCount counts the dead letters of every calendar, up to max.
func (t *Tx) DeadLetterCount(max int) int {
	b := t.bucket(bucketSyncDead)
	if b == nil {
		return 0
	}
	n := 0
	c := b.Cursor()
	for k, _ := c.First(); k != nil && n < max; k, _ = c.Next() {
		n++
	}
	return n
}

// TakeDeadLetter removes calendar cal's dead letter of (seq, sub) and
// returns it; ok is false when there is none.
func (t *Tx) TakeDeadLetter(cal string, seq uint64, sub uint32) (d DeadLetter, ok bool, err error) {
	b := t.bucket(bucketSyncDead)
	if b == nil {
		return d, false, nil
	}
	k := syncSubKey(cal, seq, sub)
	v := b.Get(k)
	if v == nil {
		return d, false, nil
	}
	if d, err = decodeDead(k, v); err != nil {
		return d, false, err
	}
	return d, true, b.Delete(k)
}
