package data

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Tx is a transaction on the index. Values returned from it are copies and
// stay valid after the transaction ends.
type Tx struct {
	tx   *bolt.Tx
	cals *calCache
	// nextExpiry is, per partition, the earliest request record expiry
	// PruneRequests left in the index in this transaction (see retention.go).
	nextExpiry map[int]time.Time
	// pruned is, per partition, the last request expiry entry
	// PruneRequests deleted in this transaction: the partition has no
	// entry up to it (PutRequestExpiry drops the mark when it lists one
	// at or below it).
	pruned map[int][]byte
	// byCal remembers, for this transaction only, each calendar's bucket
	// handles and decoded record, which the writer looks up several times
	// per command. Dropped whenever a calendar bucket is deleted.
	byCal map[string]*txCalendar
	// buffered is set in write transactions: writes to the shared trees
	// wait in memory until flushRuns (see overlay.go).
	buffered bool
	// filters are the store's key filters (Store.TrackKeys), in write
	// transactions.
	filters *[3]*keyFilter
	// pending, when set, holds the runs across transactions
	// (Store.CommitPending).
	pending *Pending
	// fork is set in a fork (fork.go): tx is then read-only, and every
	// write stays in memory.
	fork *forkState
}

// txCalendar is what a transaction has looked up about one calendar.
type txCalendar struct {
	cb   *bkt // cal/<id>, nil until found or created
	subs [3]*calTree
	// cal is the decoded calendar record when loaded is set (found
	// tells whether it exists).
	cal           Calendar
	loaded, found bool
	// span is the calendar's maxspan when spanLoaded is set.
	span       time.Duration
	spanLoaded bool
	// busyRecs and busySlots are the busy buckets (nil: none) when
	// busyLooked is set: most calendars have none, and every booking
	// check asks.
	busyRecs, busySlots *bkt
	busyLooked          bool
	// marked is set once the calendar is known to be in bucketSpan.
	marked bool
	// absent is a booking id found absent since the calendar's last
	// booking write (see knownAbsent).
	absent string
}

// Indexes of txCalendar.subs.
const (
	iBookings = iota
	iSlots
	iRequests
)

var treeNames = [3][]byte{treeBookings, treeSlots, treeRequests}

func (t *Tx) txCal(id string) *txCalendar {
	if c := t.byCal[id]; c != nil {
		return c
	}
	if t.byCal == nil {
		t.byCal = make(map[string]*txCalendar)
	}
	c := &txCalendar{}
	t.byCal[id] = c
	return c
}

// forgetCalendars drops the transaction's lookups (after buckets were
// deleted), putting their pending writes into bbolt first.
func (t *Tx) forgetCalendars() error {
	if t.fork != nil {
		// A fork's runs are its Pending's, which outlives the lookups.
		t.byCal = nil
		return nil
	}
	if err := t.flushRuns(); err != nil {
		return err
	}
	t.byCal = nil
	return nil
}

// EncodeTime turns t into 8 bytes whose byte order is time order (unix
// nanoseconds with the sign bit flipped, big-endian).
func EncodeTime(t time.Time) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixNano())^(1<<63))
	return b[:]
}

var (
	minEncodable = time.Unix(0, math.MinInt64)
	maxEncodable = time.Unix(0, math.MaxInt64)
)

// seekKey is EncodeTime saturated at the ends of the encodable range, for
// cursor positions computed by adding spans to query bounds.
func seekKey(t time.Time) []byte {
	switch {
	case t.Before(minEncodable):
		return make([]byte, 8)
	case t.After(maxEncodable):
		return []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	}
	return EncodeTime(t)
}

// DecodeTime is the inverse of EncodeTime; the result is in UTC.
func DecodeTime(b []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(b)^(1<<63))).UTC()
}

func partitionKey(p int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(p))
	return b[:]
}

// AppliedSeq is the last stream sequence applied for partition p (0 if none).
func (t *Tx) AppliedSeq(p int) uint64 {
	seq, _ := t.AppliedMsg(p)
	return seq
}

// AppliedMsg is the last stream sequence applied for partition p and the
// hash of the message applied at it (see SetApplied). The hash is nil when
// the index has none yet: written before hashes were kept, or by
// SetAppliedSeq.
func (t *Tx) AppliedMsg(p int) (seq uint64, hash []byte) {
	v := t.bucket(bucketApplied).Get(partitionKey(p))
	if len(v) < 8 {
		return 0, nil
	}
	if len(v) >= 24 {
		hash = bytes.Clone(v[8:24]) // a chain may follow (ExtendApplied)
	}
	return binary.BigEndian.Uint64(v), hash
}

// SetAppliedSeq records seq as the last stream sequence applied for partition
// p, in the same transaction as the changes it caused, without a message
// hash.
func (t *Tx) SetAppliedSeq(p int, seq uint64) error { return t.SetApplied(p, seq, nil) }

// SetApplied records seq as the last stream sequence applied for partition
// p, with hash, a digest of the message at seq, in the same transaction as
// the changes it caused. The value is seq (8 bytes, big-endian) ++ hash;
// a value of 8 bytes (an older index) reads as "no hash yet". The hash
// lets a restart notice that the stream holds another message at seq than
// the one applied (a lost tail that new messages refilled). It keeps no
// hash chain (the writers record what they apply with ExtendApplied): the
// partition's next ExtendApplied starts a new chain after seq.
func (t *Tx) SetApplied(p int, seq uint64, hash []byte) error {
	b := make([]byte, 8, 8+len(hash))
	binary.BigEndian.PutUint64(b, seq)
	return t.bucket(bucketApplied).Put(partitionKey(p), append(b, hash...))
}

// Calendar returns the calendar with id, or ErrNotFound.
//
// The maps, slices and pointers inside the result (Rules, Link) may be
// shared with other callers (decoded calendars are cached): treat them as
// read-only; replace them, never modify them in place.
func (t *Tx) Calendar(id string) (Calendar, error) {
	tc := t.txCal(id)
	if tc.loaded {
		if !tc.found {
			return Calendar{}, ErrNotFound
		}
		return tc.cal, nil
	}
	var c Calendar
	v := t.bucket(bucketCalendars).Get([]byte(id))
	if v == nil {
		tc.loaded = true
		return c, ErrNotFound
	}
	c, ok := t.cals.get(id, v)
	if !ok {
		if err := json.Unmarshal(v, &c); err != nil {
			return Calendar{}, err
		}
		t.cals.put(id, v, c)
	}
	tc.cal, tc.loaded, tc.found = c, true, true
	return c, nil
}

// CalendarExists reports whether calendar id exists, without decoding it.
func (t *Tx) CalendarExists(id string) bool {
	if tc := t.byCal[id]; tc != nil && tc.loaded {
		return tc.found
	}
	return t.bucket(bucketCalendars).Get([]byte(id)) != nil
}

// PutCalendar creates or replaces a calendar.
func (t *Tx) PutCalendar(c Calendar) error {
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := t.bucket(bucketCalendars).Put([]byte(c.ID), v); err != nil {
		return err
	}
	tc := t.txCal(c.ID)
	tc.loaded, tc.found, tc.cal = false, false, Calendar{} // decoded from v when next read
	return t.calMark(c.ID)
}

// calBucket returns the per-calendar bucket, creating it when asked.
func (t *Tx) calBucket(calID string, create bool) (*bkt, error) {
	if tc := t.byCal[calID]; tc != nil && tc.cb != nil {
		return tc.cb, nil
	}
	root := t.bucket(bucketCal)
	b := root.Bucket([]byte(calID))
	if b == nil && !create {
		return nil, nil
	}
	if b == nil {
		var err error
		if b, err = root.CreateBucket([]byte(calID)); err != nil {
			return nil, err
		}
	}
	t.txCal(calID).cb = b
	return b, nil
}

// calTree returns calendar calID's range of shared tree i (iBookings,
// iSlots, iRequests).
func (t *Tx) calTree(calID string, i int) *calTree {
	tc := t.txCal(calID)
	if tc.subs[i] == nil {
		tc.subs[i] = newCalTree(t.tx.Bucket(treeNames[i]), calID)
		if t.pending != nil {
			tc.subs[i].run = t.pending.run(calID, i)
			tc.subs[i].filter = t.filter(i)
		} else if t.buffered {
			tc.subs[i].run = newMemRun()
			tc.subs[i].filter = t.filter(i)
		}
	}
	return tc.subs[i]
}

// CheckFile runs bbolt's own consistency check of the whole file (page
// references, freelist, key order) as this transaction sees it; nil when
// it finds nothing. It reads every page: for tests and tools. bbolt's check
// reads the file's freelist, which belongs to the writer: call it inside
// Commit (and roll back), never in a View while commits may run.
func (t *Tx) CheckFile() error {
	var errs []error
	for err := range t.tx.Check() {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ForEachBooking calls fn for every booking record of calID, confirmed or
// cancelled, in booking id order.
func (t *Tx) ForEachBooking(calID string, fn func(Booking) error) error {
	return t.calTree(calID, iBookings).ForEach(func(k, v []byte) error {
		id, _ := idFromKey(k)
		s, err := decodeStoredBooking(calID, id, v)
		if err != nil {
			return fmt.Errorf("data: booking %s/%s: %w", calID, id, err)
		}
		return fn(s.Booking)
	})
}

// CalendarIDs lists every calendar id in byte order.
func (t *Tx) CalendarIDs() []string {
	var ids []string
	_ = t.bucket(bucketCalendars).ForEach(func(k, _ []byte) error {
		ids = append(ids, string(k))
		return nil
	})
	return ids
}
