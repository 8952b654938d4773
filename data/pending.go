package data

import (
	"bytes"
	"time"
)

// The index of collective parts in status pending, by the log time of
// their prepare: the partition's owner resolves those left pending too
// long (an API instance that prepared them stopped before the decision
// reached them), so it needs to find them without a scan.
var bucketPending = []byte("pendingparts") // created (8) ++ calendar ++ 0 ++ id -> nil

func (t *Tx) pendingIndex(put bool, created time.Time, calID, id string) error {
	b, err := t.tx.CreateBucketIfNotExists(bucketPending)
	if err != nil {
		return err
	}
	k := append(append(append(EncodeTime(created), calID...), 0), id...)
	if put {
		return b.Put(k, nil)
	}
	return b.Delete(k)
}

// PendingPart is a collective's part still pending.
type PendingPart struct {
	Calendar, ID string
	Created      time.Time
}

// PendingBefore lists up to max parts pending since before t, oldest first,
// of the calendars keep accepts.
func (t *Tx) PendingBefore(before time.Time, max int, keep func(cal string) bool) []PendingPart {
	b := t.tx.Bucket(bucketPending)
	if b == nil {
		return nil
	}
	var out []PendingPart
	limit := EncodeTime(before)
	c := b.Cursor()
	for k, _ := c.First(); k != nil && len(out) < max && bytes.Compare(k[:8], limit) < 0; k, _ = c.Next() {
		cal, id, _ := bytes.Cut(k[8:], []byte{0})
		if !keep(string(cal)) {
			continue
		}
		out = append(out, PendingPart{Calendar: string(cal), ID: string(id), Created: DecodeTime(k[:8])})
	}
	return out
}

// dropPending removes the pending entries of the calendars belongs
// accepts (a partition being rebuilt).
func (t *Tx) dropPending(belongs func(cal string) bool) error {
	b := t.tx.Bucket(bucketPending)
	if b == nil {
		return nil
	}
	var stale [][]byte
	_ = b.ForEach(func(k, _ []byte) error {
		if cal, _, ok := bytes.Cut(k[8:], []byte{0}); ok && belongs(string(cal)) {
			stale = append(stale, append([]byte(nil), k...))
		}
		return nil
	})
	for _, k := range stale {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
