package data

import (
	"bytes"
	"fmt"
	"time"
)

// Request records that expire (RequestRecord.Expires) are also listed in
// bucket reqexp, by partition and expiry, so that each partition's writer
// can drop its due records a few at a time while it applies commands. The
// writer drives it with the log time of the command it applies, never a
// clock, so replay and every instance drop the same records at the same
// point of the log. Entries are per partition because a writer may only
// touch its own partition's calendars: a partition's apply must give the
// same result whatever the other partitions did meanwhile.

var bucketRequestExpiry = []byte("reqexp") // partition(4) ++ expiry(8) ++ calendar ++ 0 ++ request id -> nil

func requestExpiryKey(p int, exp time.Time, calID, reqID string) []byte {
	k := make([]byte, 0, 13+len(calID)+len(reqID))
	k = append(k, partitionKey(p)...)
	k = append(k, EncodeTime(exp)...)
	k = append(k, calID...)
	k = append(k, 0)
	return append(k, reqID...)
}

// RequestExpiry is one entry of the request expiry index.
type RequestExpiry struct {
	Partition         int
	Expires           time.Time
	Calendar, Request string
}

func decodeRequestExpiry(k []byte) (RequestExpiry, bool) {
	if len(k) < 13 {
		return RequestExpiry{}, false
	}
	cal, req, ok := bytes.Cut(k[12:], []byte{0})
	return RequestExpiry{Partition: int(uint32(k[0])<<24 | uint32(k[1])<<16 | uint32(k[2])<<8 | uint32(k[3])),
		Expires: DecodeTime(k[4:12]), Calendar: string(cal), Request: string(req)}, ok
}

// PutExpiringRequest is PutRequest for a record that is dropped at log time
// rec.Expires (which must be set) by PruneRequests of partition p, the
// partition of calID.
func (t *Tx) PutExpiringRequest(p int, calID, reqID string, rec RequestRecord) error {
	if rec.Expires.IsZero() {
		return fmt.Errorf("data: expiring request record of %s/%s without an expiry", calID, reqID)
	}
	if err := t.PutRequest(calID, reqID, rec); err != nil {
		return err
	}
	return t.PutRequestExpiry(p, calID, reqID, rec.Expires)
}

// PutRequestExpiry lists the record of reqID on calID, which expires at
// exp, in partition p's request expiry index: PutExpiringRequest does it
// for a record of its own, the writer for a creation record kept with its
// booking (CreateBooking).
func (t *Tx) PutRequestExpiry(p int, calID, reqID string, exp time.Time) error {
	b, err := t.createBucket(bucketRequestExpiry)
	if err != nil {
		return err
	}
	if next, ok := t.nextExpiry[p]; ok && exp.Before(next) {
		t.nextExpiry[p] = exp
	}
	key := requestExpiryKey(p, exp, calID, reqID)
	if h := t.pruned[p]; h != nil && bytes.Compare(key, h) <= 0 {
		delete(t.pruned, p)
	}
	// A record it replaces (one whose expiry had passed, or one kept
	// forever) may leave an entry behind; PruneRequests then finds the
	// record's expiry differs and only drops the entry.
	return b.Put(key, nil)
}

// PruneRequests drops request records of partition p whose expiry is at or
// before now, earliest first, visiting at most max entries of the expiry
// index; it returns how many it visited. An entry whose record is gone or
// now has another expiry is dropped alone. Callers bound max so that the
// cost per command stays small; a backlog (after a quiet spell) is worked
// off by the following commands.
func (t *Tx) PruneRequests(p int, now time.Time, max int) (int, error) {
	if next, ok := t.nextExpiry[p]; ok && now.Before(next) {
		return 0, nil // nothing due: the common case costs no seek
	}
	if t.nextExpiry == nil {
		t.nextExpiry = map[int]time.Time{}
	}
	b := t.bucket(bucketRequestExpiry)
	if b == nil {
		t.nextExpiry[p] = maxEncodable
		return 0, nil
	}
	// Entries up to the last one this transaction pruned are gone: the
	// walk starts after it. In a fork (fork.go) the deleted entries stay
	// as deletions in memory until the merge, and a walk from the
	// partition's first key would pass all of them at every command.
	prefix, from := partitionKey(p), t.pruned[p]
	if from == nil {
		from = prefix
	}
	c := b.Cursor()
	n := 0
	for k, _ := c.Seek(from); ; k, _ = c.Seek(from) {
		if k == nil || !bytes.HasPrefix(k, prefix) {
			t.nextExpiry[p] = maxEncodable
			return n, nil
		}
		e, ok := decodeRequestExpiry(k)
		if e.Expires.After(now) || n == max {
			t.nextExpiry[p] = e.Expires
			return n, nil
		}
		if ok {
			if err := t.dropExpiredRequest(e); err != nil {
				return n, err
			}
		}
		// Seek again after the delete: a bbolt cursor must not be
		// advanced past a key deleted under it.
		from = bytes.Clone(k)
		if err := c.Delete(); err != nil {
			return n, err
		}
		if t.pruned == nil {
			t.pruned = map[int][]byte{}
		}
		t.pruned[p] = from
		n++
	}
}

// dropExpiredRequest deletes the record of e if it still expires at e's
// time: the request's own record, or else the creation record kept in
// the booking it created.
func (t *Tx) dropExpiredRequest(e RequestExpiry) error {
	rb := t.calTree(e.Calendar, iRequests)
	if v := rb.Get([]byte(e.Request)); v != nil {
		if exp, ok := recordExpiry(v); ok && DecodeTime(exp).Equal(e.Expires) {
			return rb.Delete([]byte(e.Request))
		}
		return nil
	}
	id := BookingID(e.Calendar, e.Request)
	s, err := t.storedBooking(e.Calendar, id)
	if err == ErrNotFound || err == nil && (s.creation == nil || !s.creation.Expires.Equal(e.Expires)) {
		return nil
	} else if err != nil {
		return err
	}
	return t.dropCreation(s)
}

// ForEachRequestExpiry calls fn for every entry of the request expiry
// index, in key order (partition, expiry, calendar, request id).
func (t *Tx) ForEachRequestExpiry(fn func(RequestExpiry) error) error {
	b := t.bucket(bucketRequestExpiry)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, _ []byte) error {
		e, ok := decodeRequestExpiry(k)
		if !ok {
			return fmt.Errorf("data: malformed request expiry key %x", k)
		}
		return fn(e)
	})
}

// ForEachRequest calls fn for every request record of calID with a key
// of its own, in request id order; creation records are
// ForEachCreation's.
func (t *Tx) ForEachRequest(calID string, fn func(reqID string, rec RequestRecord) error) error {
	return t.calTree(calID, iRequests).ForEach(func(k, v []byte) error {
		rec, err := decodeRecord(v)
		if err != nil {
			return fmt.Errorf("data: request %s/%s: %w", calID, k, err)
		}
		rec.Calendar, rec.RequestID = calID, string(k)
		return fn(string(k), rec)
	})
}

// ForEachCreation calls fn for every creation record kept in a booking of
// calID, in booking id order. Their request ids are not kept (the booking
// id is a hash of it): rec.RequestID is empty.
func (t *Tx) ForEachCreation(calID string, fn func(bookingID string, rec RequestRecord) error) error {
	return t.calTree(calID, iBookings).ForEach(func(k, v []byte) error {
		id, _ := idFromKey(k)
		s, err := decodeStoredBooking(calID, id, v)
		if err != nil {
			return fmt.Errorf("data: booking %s/%s: %w", calID, id, err)
		}
		if s.creation == nil {
			return nil
		}
		created, err := s.created()
		if err != nil {
			return err
		}
		return fn(id, creationToRecord(calID, "", s.creation, &created))
	})
}

// dropRequestExpiries removes the expiry index entries of partition p and
// of the calendars for which belongs is true (ResetPartition).
func (t *Tx) dropRequestExpiries(p int, belongs func(calID string) bool) error {
	delete(t.nextExpiry, p)
	b := t.bucket(bucketRequestExpiry)
	if b == nil {
		return nil
	}
	var doomed [][]byte
	_ = b.ForEach(func(k, _ []byte) error {
		if e, ok := decodeRequestExpiry(k); !ok || e.Partition == p || belongs(e.Calendar) {
			doomed = append(doomed, bytes.Clone(k))
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
