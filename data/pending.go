package data

import (
	"bytes"
	"time"
)

// The index of collective parts in status pending, by the log time of
// their prepare, or a held part's expiry: the partition's owner resolves
// those left pending too long (an API instance that prepared them stopped
// before the decision reached them) and the held ones that expired, so it
// needs to find them without a scan.
var bucketPending = []byte("pendingparts") // due (8) ++ calendar ++ 0 ++ id -> nil

// pendingDue is the time a pending part is indexed under: its expiry when
// it is a hold's, else its creation.
func pendingDue(bk *Booking) time.Time {
	if bk.ExpiresAt != nil {
		return *bk.ExpiresAt
	}
	return bk.CreatedAt
}

func (t *Tx) pendingIndex(put bool, created time.Time, calID, id string) error {
	b, err := t.createBucket(bucketPending)
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
	// Due is the part's creation, or a held part's expiry.
	Due time.Time
}

// PendingBefore lists up to max parts pending whose creation (or a held
// part's expiry) is before t, earliest first, of the calendars keep
// accepts.
func (t *Tx) PendingBefore(before time.Time, max int, keep func(cal string) bool) []PendingPart {
	b := t.bucket(bucketPending)
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
		out = append(out, PendingPart{Calendar: string(cal), ID: string(id), Due: DecodeTime(k[:8])})
	}
	return out
}

// dropPending removes the pending entries of the calendars belongs
// accepts (a partition being rebuilt).
func (t *Tx) dropPending(belongs func(cal string) bool) error {
	return deleteWhere(t.bucket(bucketPending), func(k []byte) bool {
		cal, _, ok := bytes.Cut(k[8:], []byte{0})
		return ok && belongs(string(cal))
	})
}

// deleteWhere deletes the keys of b (which may be nil) that del accepts.
func deleteWhere(b *bkt, del func(k []byte) bool) error {
	if b == nil {
		return nil
	}
	var doomed [][]byte
	_ = b.ForEach(func(k, _ []byte) error {
		if del(k) {
			doomed = append(doomed, append([]byte(nil), k...))
		}
		return nil
	})
	for _, k := range doomed {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
