package data

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Sentinel errors of the data package.
var (
	// ErrClosed is returned by Commit after Close.
	ErrClosed = errors.New("data: store closed")
	// ErrNotFound is returned by lookups of a missing calendar or booking.
	ErrNotFound = errors.New("data: not found")
	// ErrSchema is returned by Open for a file written by an incompatible version.
	ErrSchema = errors.New("data: incompatible index schema")
)

// schemaVersion is bumped on any change of the on-disk layout.
const schemaVersion = "4"

var (
	bucketMeta      = []byte("meta")
	bucketApplied   = []byte("applied")
	bucketCalendars = []byte("calendars")
	bucketCal       = []byte("cal") // cal/<id>/{b,s,r}

	subBookings = []byte("b") // booking id -> Booking (binary, see AppendBooking)
	subSlots    = []byte("s") // start(8) ++ booking id -> end and kind: confirmed bookings and holds (see SlotEntry)
	subRequests = []byte("r") // request id -> RequestRecord (binary, see encodeRecord)

	keySchema = []byte("schema")
)

// Store is the bbolt slot index. Reads may run concurrently from any
// goroutine (View); all writes go through Commit, which batches the work of
// every caller that is ready into one read-write transaction (group commit).
type Store struct {
	db   *bolt.DB
	reqs chan *commitReq
	quit chan struct{}
	done chan struct{}
	// committed carries committed groups, in commit order, to the
	// goroutine that waits for their conditions (see durable.go).
	committed chan *committedGroup
	waiting   atomic.Uint64 // groups sent to committed and not answered yet
	vis       visibility

	closeOnce sync.Once
	closeErr  error

	noSync    bool   // commits are not fsynced (Options.NoSync)
	discarded string // why Open discarded an untrusted index ("" if it did not)

	commits  atomic.Uint64 // committed transactions (one fsync each unless NoSync)
	grouped  atomic.Uint64 // Commit calls those transactions carried
	commitNs atomic.Uint64 // time spent in bbolt's Commit (write + fsync)

	cals calCache // decoded calendars (see calcache.go)
}

// CommitStats counts the store's group commits.
type CommitStats struct {
	Commits  uint64        // read-write transactions committed (one fsync each unless NoSync)
	Calls    uint64        // Commit calls they carried
	InCommit time.Duration // total time in bbolt Commit (page writes + fsync)
}

// Stats returns the group-commit counters since Open.
func (s *Store) Stats() CommitStats {
	return CommitStats{Commits: s.commits.Load(), Calls: s.grouped.Load(), InCommit: time.Duration(s.commitNs.Load())}
}

type commitReq struct {
	fn     func(*Tx) error
	err    chan error
	nosync bool
	// durable, when set, must return nil before the caller is answered
	// and the transaction is shown to readers (see CommitDurable).
	durable func() error
}

// Open opens (or creates) the index file at path; every commit is fsynced.
func Open(path string) (*Store, error) { return OpenWith(path, Options{}) }

// OpenWith opens (or creates) the index file at path with options.
func OpenWith(path string, opt Options) (*Store, error) {
	if err := MkdirAllDurable(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("data: create directory: %w", err)
	}
	why, err := uncleanReboot(path)
	if err != nil {
		return nil, err
	}
	if why != "" {
		if err := discard(path); err != nil {
			return nil, err
		}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        2 * time.Second,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		// Map 1 GiB of address space up front (the file still grows only
		// as needed): below that size a growing index is never remapped.
		// A remap costs the writer a munmap/mmap in the shared
		// transaction and waits for every open read transaction.
		InitialMmapSize: initialMmapSize,
	})
	if err != nil {
		return nil, fmt.Errorf("data: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketApplied, bucketCalendars, bucketCal} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		switch v := meta.Get(keySchema); {
		case v == nil:
			return meta.Put(keySchema, []byte(schemaVersion))
		case string(v) != schemaVersion:
			return fmt.Errorf("%w: file has %q, this build needs %q", ErrSchema, v, schemaVersion)
		}
		return nil
	})
	if err == nil {
		// Every write so far (of this or an earlier session) is on disk
		// after this; only then may the session file say so, or announce
		// commits without fsync. The directory sync makes a new file's
		// name durable.
		err = db.Sync()
	}
	if err == nil {
		err = SyncDir(filepath.Dir(path))
	}
	switch {
	case err != nil:
	case opt.NoSync:
		err = writeSession(path, "open "+bootID())
	case sessionExists(path):
		// Synced from now on; without a session file (an index only
		// ever opened synced) there is nothing to say.
		err = writeSession(path, "clean")
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	// bbolt's sync flags are set per commit by commitGroup.
	s := &Store{db: db, reqs: make(chan *commitReq, 256), quit: make(chan struct{}), done: make(chan struct{}),
		committed: make(chan *committedGroup, 64), noSync: opt.NoSync, discarded: why}
	s.vis.init(db)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		s.commitLoop()
	}()
	go func() {
		defer close(s.done)
		s.answerLoop(loopDone)
	}()
	return s, nil
}

// Close waits for the commit in progress, then closes the file. Commits
// requested afterwards fail with ErrClosed.
// Close may be called more than once, also concurrently; every call returns
// the result of the first.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.done
		if s.noSync {
			// The commits of this session reach the disk here; then
			// the session file may say so.
			s.closeErr = s.db.Sync()
			if s.closeErr == nil {
				s.closeErr = writeSession(s.db.Path(), "clean")
			}
		}
		s.closeErr = errors.Join(s.closeErr, s.db.Close())
	})
	return s.closeErr
}

// Path is the file the index lives in.
func (s *Store) Path() string { return s.db.Path() }

// Discarded says why Open did not trust the index it found and started a new,
// empty one ("" when it did not): the caller must rebuild it from the log.
func (s *Store) Discarded() string { return s.discarded }

// Synced reports whether every commit is fsynced before Commit returns
// (false with Options.NoSync).
func (s *Store) Synced() bool { return !s.noSync }

// View runs fn in a read-only transaction. It sees only transactions whose
// CommitDurable conditions have returned: when the newest commit is not
// durable yet, View waits for it (at most one sync of the log).
func (s *Store) View(fn func(*Tx) error) error {
	return s.db.View(func(btx *bolt.Tx) error {
		if err := s.vis.wait(uint64(btx.ID())); err != nil {
			return err
		}
		return fn(&Tx{tx: btx, cals: &s.cals})
	})
}

// ViewIfVisible runs fn in a read-only transaction when the newest commit
// is visible already, and reports whether it did; it never waits. It is for
// reads that only save work and may be skipped: the refusals from the index,
// whose request then goes to the writer. Waiting there would put a sync of
// the log before the request is even logged, and under load a sync is
// almost always running.
func (s *Store) ViewIfVisible(fn func(*Tx) error) (bool, error) {
	ran := false
	err := s.db.View(func(btx *bolt.Tx) error {
		if s.vis.upTo.Load() < uint64(btx.ID()) {
			return nil
		}
		ran = true
		return fn(&Tx{tx: btx, cals: &s.cals})
	})
	return ran, err
}

// Commit runs fn inside a read-write transaction and returns once that
// transaction is committed: fsynced, or with Options.NoSync written to the OS
// (durable against the process's death only). Calls from several goroutines that arrive
// while a commit is in progress share the next transaction: one fsync covers
// all of them. fn may be run more than once (when another caller's function
// in the same group fails, the group is rolled back and the rest re-run), so
// it must derive all its output from the transaction, not accumulate it.
// If fn returns an error, nothing it wrote is kept and Commit returns that
// error.
func (s *Store) Commit(fn func(*Tx) error) error { return s.commit(fn, false, nil) }

// CommitDurable is Commit for writes derived from a log that must be
// durable before anyone hears of them: it returns once the transaction is
// committed and durable (the fsync of the log that fn's decisions derive
// from) has returned nil. The commit loop does not wait for durable: it
// builds and commits the next groups meanwhile, and a separate goroutine
// answers the groups in commit order as their conditions return. Until
// then no reader sees the transaction (View waits), so nothing decided from
// a log entry that a power loss could still take is shown to anyone. If
// durable fails, CommitDurable returns its error, and every later commit
// and every View of a later state fail with it too: the transaction is in
// the index but must never be read. A nil durable makes it Commit.
func (s *Store) CommitDurable(durable func() error, fn func(*Tx) error) error {
	return s.commit(fn, false, durable)
}

// CommitUnsynced is Commit without the fsync: it returns once the
// transaction is written to the file (the OS's page cache), so a process
// crash keeps it but a power loss or OS crash may lose it or leave the file
// torn. It is for building an index that is thrown away if the build does
// not finish (replay); finish such a build with a Commit, whose fsync
// covers the earlier pages too. A group holding any Commit call is fsynced
// as usual.
func (s *Store) CommitUnsynced(fn func(*Tx) error) error { return s.commit(fn, true, nil) }

// CommitDurableAsync is CommitDurable without the wait: it queues fn and
// returns the channel its answer arrives on (read it with Await). Calls from
// one goroutine are applied in the order they were made, so a caller may
// queue its next function before the previous one is committed.
func (s *Store) CommitDurableAsync(durable func() error, fn func(*Tx) error) <-chan error {
	r := &commitReq{fn: fn, err: make(chan error, 1), durable: durable}
	select {
	case <-s.quit:
		r.err <- ErrClosed
		return r.err
	default:
	}
	select {
	case s.reqs <- r:
	case <-s.quit:
		r.err <- ErrClosed
	}
	return r.err
}

// Await waits for the answer of CommitDurableAsync.
func (s *Store) Await(answer <-chan error) error {
	select {
	case err := <-answer:
		return err
	case <-s.done:
		// The commit loop answers everything it took before done is
		// closed; a request still queued when Close raced with it was
		// never run.
		select {
		case err := <-answer:
			return err
		default:
			return ErrClosed
		}
	}
}

// Done is closed once the store has stopped committing (after Close): an
// answer still missing then never comes (see Await).
func (s *Store) Done() <-chan struct{} { return s.done }

func (s *Store) commit(fn func(*Tx) error, nosync bool, durable func() error) error {
	// Checked first because a select with both cases ready picks one at
	// random: without this, a Commit after Close could enqueue anyway.
	select {
	case <-s.quit:
		return ErrClosed
	default:
	}
	r := &commitReq{fn: fn, err: make(chan error, 1), nosync: nosync, durable: durable}
	select {
	case s.reqs <- r:
	case <-s.quit:
		return ErrClosed
	}
	return s.Await(r.err)
}

// initialMmapSize is the address space mapped for the index at Open.
const initialMmapSize = 1 << 30

// maxGroup bounds the number of callers sharing one transaction.
const maxGroup = 64

func (s *Store) commitLoop() {
	group := make([]*commitReq, 0, maxGroup)
	for {
		var first *commitReq
		select {
		case first = <-s.reqs:
		case <-s.quit:
			// Fail whatever is still queued; callers are shutting down too.
			for {
				select {
				case r := <-s.reqs:
					r.err <- ErrClosed
				default:
					return
				}
			}
		}
		group = append(group[:0], first)
	drain:
		for len(group) < maxGroup {
			select {
			case r := <-s.reqs:
				group = append(group, r)
			default:
				break drain
			}
		}
		s.commitGroup(group)
	}
}

// commitGroup applies every request of group in one transaction. A request
// whose function fails is answered with its error and dropped; the others are
// re-run in a fresh transaction so that the failed one leaves no writes. The
// committed group goes to answerLoop, which answers it once its conditions
// (CommitDurable) hold.
func (s *Store) commitGroup(group []*commitReq) {
	for len(group) > 0 {
		btx, err := s.db.Begin(true)
		if err != nil {
			for _, r := range group {
				r.err <- err
			}
			return
		}
		tx := &Tx{tx: btx, cals: &s.cals}
		failed := -1
		var ferr error
		for i, r := range group {
			if ferr = r.fn(tx); ferr != nil {
				failed = i
				break
			}
		}
		if failed >= 0 {
			_ = btx.Rollback()
			group[failed].err <- ferr
			group = append(group[:failed], group[failed+1:]...)
			continue
		}
		// Only this goroutine commits, so it may switch bbolt's sync
		// flags per transaction: a store opened with NoSync never
		// fsyncs, another one unless every call of the group asked not to.
		nosync := true
		for _, r := range group {
			nosync = nosync && r.nosync
		}
		nosync = nosync || s.noSync
		s.db.NoSync, s.db.NoGrowSync = nosync, nosync
		txid := uint64(btx.ID())
		began := time.Now()
		if err = btx.Commit(); err != nil {
			for _, r := range group {
				r.err <- err
			}
			return
		}
		s.commitNs.Add(uint64(time.Since(began)))
		s.commits.Add(1)
		s.grouped.Add(uint64(len(group)))
		s.committedTx(txid, group)
		return
	}
}

// Tx is a transaction on the index. Values returned from it are copies and
// stay valid after the transaction ends.
type Tx struct {
	tx   *bolt.Tx
	cals *calCache
	// nextExpiry is, per partition, the earliest request record expiry
	// PruneRequests left in the index in this transaction (see retention.go).
	nextExpiry map[int]time.Time
	// byCal remembers, for this transaction only, each calendar's bucket
	// handles and decoded record, which the writer looks up several times
	// per command. Dropped whenever a calendar bucket is deleted.
	byCal map[string]*txCalendar
}

// txCalendar is what a transaction has looked up about one calendar.
type txCalendar struct {
	cb   *bolt.Bucket // cal/<id>, nil until found or created
	subs [3]*bolt.Bucket
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
	busyRecs, busySlots *bolt.Bucket
	busyLooked          bool
}

// Indexes of txCalendar.subs.
const (
	iBookings = iota
	iSlots
	iRequests
)

var subNames = [3][]byte{subBookings, subSlots, subRequests}

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
// deleted).
func (t *Tx) forgetCalendars() { t.byCal = nil }

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
	v := t.tx.Bucket(bucketApplied).Get(partitionKey(p))
	if len(v) < 8 {
		return 0, nil
	}
	if len(v) > 8 {
		hash = bytes.Clone(v[8:])
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
// the one applied (a lost tail that new messages refilled).
func (t *Tx) SetApplied(p int, seq uint64, hash []byte) error {
	b := make([]byte, 8, 8+len(hash))
	binary.BigEndian.PutUint64(b, seq)
	return t.tx.Bucket(bucketApplied).Put(partitionKey(p), append(b, hash...))
}

// Calendar returns the calendar with id, or ErrNotFound.
//
// The maps, slices and pointers inside the result (Rules, Google) may be
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
	v := t.tx.Bucket(bucketCalendars).Get([]byte(id))
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
	return t.tx.Bucket(bucketCalendars).Get([]byte(id)) != nil
}

// PutCalendar creates or replaces a calendar.
func (t *Tx) PutCalendar(c Calendar) error {
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := t.tx.Bucket(bucketCalendars).Put([]byte(c.ID), v); err != nil {
		return err
	}
	tc := t.txCal(c.ID)
	tc.loaded, tc.found, tc.cal = false, false, Calendar{} // decoded from v when next read
	_, err = t.calBucket(c.ID, true)
	return err
}

// calBucket returns the per-calendar bucket, creating it when asked.
func (t *Tx) calBucket(calID string, create bool) (*bolt.Bucket, error) {
	if tc := t.byCal[calID]; tc != nil && tc.cb != nil {
		return tc.cb, nil
	}
	root := t.tx.Bucket(bucketCal)
	b := root.Bucket([]byte(calID))
	if b == nil && !create {
		return nil, nil
	}
	if b == nil {
		var err error
		if b, err = root.CreateBucket([]byte(calID)); err != nil {
			return nil, err
		}
		for _, name := range subNames {
			if _, err := b.CreateBucket(name); err != nil {
				return nil, err
			}
		}
	}
	t.txCal(calID).cb = b
	return b, nil
}

// calSub returns sub-bucket i (iBookings, iSlots, iRequests) of calendar
// calID, or nil if the calendar has no buckets.
func (t *Tx) calSub(calID string, i int) *bolt.Bucket {
	if tc := t.byCal[calID]; tc != nil && tc.subs[i] != nil {
		return tc.subs[i]
	}
	cb, _ := t.calBucket(calID, false)
	if cb == nil {
		return nil
	}
	b := cb.Bucket(subNames[i])
	if b != nil {
		t.txCal(calID).subs[i] = b
	}
	return b
}

// BookingExists reports whether calendar calID has a booking (or hold)
// record with id, whatever its status, without decoding it.
func (t *Tx) BookingExists(calID, id string) bool {
	b := t.calSub(calID, iBookings)
	return b != nil && b.Get([]byte(id)) != nil
}

// Booking returns the booking id of calendar calID, or ErrNotFound.
func (t *Tx) Booking(calID, id string) (Booking, error) {
	var bk Booking
	b := t.calSub(calID, iBookings)
	if b == nil {
		return bk, ErrNotFound
	}
	v := b.Get([]byte(id))
	if v == nil {
		return bk, ErrNotFound
	}
	return decodeBooking(v)
}

func slotKey(start time.Time, id string) []byte {
	k := make([]byte, 0, 8+len(id))
	k = append(k, EncodeTime(start)...)
	return append(k, id...)
}

// PutBooking stores bk and keeps the slot index in step with its status: a
// confirmed booking or a hold occupies its interval, anything else does not.
// If bk replaces a record with another start, the old slot is removed too.
// The caller (the partition's actor) has already checked the rules.
func (t *Tx) PutBooking(bk Booking) error {
	cb, err := t.calBucket(bk.CalendarID, true)
	if err != nil {
		return err
	}
	v := AppendBooking(make([]byte, 0, 160+len(bk.Customer)+len(bk.Metadata)), &bk)
	bookings, slots := t.calSub(bk.CalendarID, iBookings), t.calSub(bk.CalendarID, iSlots)
	if old := bookings.Get([]byte(bk.ID)); old != nil {
		prev, err := decodeBooking(old)
		if err != nil {
			return fmt.Errorf("data: booking %s: %w", bk.ID, err)
		}
		if !prev.Start.Equal(bk.Start) {
			if err := slots.Delete(slotKey(prev.Start, prev.ID)); err != nil {
				return err
			}
		}
		if prev.Status == StatusHeld && prev.ExpiresAt != nil {
			if err := t.holdIndex(false, *prev.ExpiresAt, prev.CalendarID, prev.ID); err != nil {
				return err
			}
		}
	}
	if err := bookings.Put([]byte(bk.ID), v); err != nil {
		return err
	}
	key := slotKey(bk.Start, bk.ID)
	if !Occupies(bk.Status) {
		return slots.Delete(key)
	}
	if bk.Status == StatusHeld && bk.ExpiresAt != nil {
		if err := t.holdIndex(true, *bk.ExpiresAt, bk.CalendarID, bk.ID); err != nil {
			return err
		}
	}
	if err := t.growMaxSpan(bk.CalendarID, cb, bk.End.Sub(bk.Start)+bk.BufferBefore+bk.BufferAfter); err != nil {
		return err
	}
	return slots.Put(key, encodeSlotValue(&bk))
}

// SlotEntry values: end (8), flags (1: hold), hold expiry (8), buffer before
// (8), buffer after (8). The first 8 bytes alone decode as the end.
const slotHold = 1

func encodeSlotValue(bk *Booking) []byte {
	v := make([]byte, 0, 33)
	v = append(v, EncodeTime(bk.End)...)
	var flags byte
	var exp int64
	if bk.Status == StatusHeld {
		flags |= slotHold
		if bk.ExpiresAt != nil {
			exp = bk.ExpiresAt.UnixNano()
		}
	}
	v = append(v, flags)
	v = AppendInt64(v, exp)
	v = AppendInt64(v, int64(bk.BufferBefore))
	return AppendInt64(v, int64(bk.BufferAfter))
}

// SlotEntry is one entry of the slot index: an interval occupied by a confirmed
// booking or a hold.
type SlotEntry struct {
	ID           string
	Start, End   time.Time
	Hold         bool
	Expires      time.Time // holds only
	BufferBefore time.Duration
	BufferAfter  time.Duration
}

// Interval is the slot's own interval.
func (s *SlotEntry) Interval() Interval { return Interval{Start: s.Start, End: s.End} }

// Buffered is the slot's interval widened by its buffers.
func (s *SlotEntry) Buffered() Interval {
	return Interval{Start: s.Start.Add(-s.BufferBefore), End: s.End.Add(s.BufferAfter)}
}

// LiveAt reports whether the slot occupies its interval at now: a hold stops
// occupying when it expires, even before its expiry is recorded.
func (s *SlotEntry) LiveAt(now time.Time) bool { return !s.Hold || now.Before(s.Expires) }

func decodeSlot(k, v []byte) SlotEntry {
	s := SlotEntry{ID: string(k[8:]), Start: DecodeTime(k[:8]), End: DecodeTime(v)}
	if len(v) >= 33 {
		s.Hold = v[8]&slotHold != 0
		if s.Hold {
			s.Expires = time.Unix(0, int64(binary.BigEndian.Uint64(v[9:17]))).UTC()
		}
		s.BufferBefore = time.Duration(binary.BigEndian.Uint64(v[17:25]))
		s.BufferAfter = time.Duration(binary.BigEndian.Uint64(v[25:33]))
	}
	return s
}

var keyMaxSpan = []byte("maxspan") // per calendar: longest buffered span ever indexed

// growMaxSpan records span if it is the calendar's longest so far. Scans for
// slots near an interval look back this far; it never shrinks, which only
// costs a longer scan.
func (t *Tx) growMaxSpan(calID string, cb *bolt.Bucket, span time.Duration) error {
	if t.maxSpan(calID, cb) >= span {
		return nil
	}
	if err := cb.Put(keyMaxSpan, binary.BigEndian.AppendUint64(nil, uint64(span))); err != nil {
		return err
	}
	t.txCal(calID).span = span
	return nil
}

// maxSpan is the longest buffered span ever indexed in calendar calID,
// whose bucket is cb (read once per transaction).
func (t *Tx) maxSpan(calID string, cb *bolt.Bucket) time.Duration {
	tc := t.txCal(calID)
	if !tc.spanLoaded {
		tc.span, tc.spanLoaded = 0, true
		if v := cb.Get(keyMaxSpan); v != nil {
			tc.span = time.Duration(binary.BigEndian.Uint64(v))
		}
	}
	return tc.span
}

// SlotsNear calls fn, in start order, for every slot of calID whose buffered
// span overlaps [from, to) (a superset: fn filters further). fn returns false
// to stop.
func (t *Tx) SlotsNear(calID string, from, to time.Time, fn func(SlotEntry) bool) {
	cb, _ := t.calBucket(calID, false)
	if cb == nil {
		return
	}
	span := t.maxSpan(calID, cb)
	c := t.calSub(calID, iSlots).Cursor()
	end := seekKey(to.Add(span))
	for k, v := c.Seek(seekKey(from.Add(-span))); k != nil && bytes.Compare(k[:8], end) < 0; k, v = c.Next() {
		s := decodeSlot(k, v)
		if !s.Buffered().Overlaps(Interval{Start: from, End: to}) {
			continue
		}
		if !fn(s) {
			return
		}
	}
}

var bucketHolds = []byte("holdexp") // expiry(8) ++ calendar ++ 0 ++ hold id -> nil

func (t *Tx) holdIndex(put bool, exp time.Time, calID, id string) error {
	b, err := t.tx.CreateBucketIfNotExists(bucketHolds)
	if err != nil {
		return err
	}
	k := append(append(append(EncodeTime(exp), calID...), 0), id...)
	if put {
		return b.Put(k, nil)
	}
	return b.Delete(k)
}

// DropDueHold removes a hold expiry index entry.
func (t *Tx) DropDueHold(h DueHold) error { return t.holdIndex(false, h.Expires, h.Calendar, h.ID) }

// DueHold is a hold whose expiry has passed.
type DueHold struct {
	Calendar, ID string
	Expires      time.Time
}

// DueHolds lists up to max holds that expire at or before now, earliest
// first.
func (t *Tx) DueHolds(now time.Time, max int) []DueHold {
	b := t.tx.Bucket(bucketHolds)
	if b == nil {
		return nil
	}
	var out []DueHold
	nowKey := EncodeTime(now)
	c := b.Cursor()
	for k, _ := c.First(); k != nil && len(out) < max && bytes.Compare(k[:8], nowKey) <= 0; k, _ = c.Next() {
		cal, id, _ := bytes.Cut(k[8:], []byte{0})
		out = append(out, DueHold{Calendar: string(cal), ID: string(id), Expires: DecodeTime(k[:8])})
	}
	return out
}

// Request returns the recorded outcome of request id reqID on calID.
//
// A record without a fingerprint is reported as absent: only invalid
// commands were recorded without one, by versions that let an invalid
// command consume its request id. Ignoring them (here and in the digest)
// makes an index built by such a version decide, and digest, like a
// replay of the same log by this one.
func (t *Tx) Request(calID, reqID string) (RequestRecord, bool, error) {
	var rec RequestRecord
	b := t.calSub(calID, iRequests)
	if b == nil {
		return rec, false, nil
	}
	v := b.Get([]byte(reqID))
	if v == nil || legacyInvalidRecord(v) {
		return rec, false, nil
	}
	rec, err := decodeRecord(v)
	return rec, err == nil, err
}

// legacyInvalidRecord reports whether an encoded request record is the
// rejection of an invalid command (no fingerprint), see Request.
func legacyInvalidRecord(v []byte) bool { return len(v) >= 10 && v[0] == recordVersion && v[9] == 0 }

// PutRequest records the outcome of a request. Records are kept forever:
// they are what makes an idempotency key outlive NATS's dedupe window.
// A request on a calendar that does not exist is recorded too. Only valid
// commands are recorded, so rec must have a fingerprint.
func (t *Tx) PutRequest(calID, reqID string, rec RequestRecord) error {
	if rec.Fingerprint == "" {
		return fmt.Errorf("data: request record of %s/%s without a fingerprint", calID, reqID)
	}
	if _, err := t.calBucket(calID, true); err != nil {
		return err
	}
	return t.calSub(calID, iRequests).Put([]byte(reqID), encodeRecord(rec))
}

// Request records are binary, not JSON: they are written once per command
// and JSON would re-validate the embedded reply on every encode.
// Layout of a record kept forever: version 1 (1 byte), seq (8), fingerprint
// length (1), fingerprint, reply (the rest). A record that expires is
// version 2: version (1), seq (8), expiry (8, EncodeTime), fingerprint
// length (1), fingerprint, reply. Records kept forever keep the first
// layout, so indexes and digests of logs without retention are unchanged.
const (
	recordVersion         = 1
	recordVersionExpiring = 2
)

func encodeRecord(rec RequestRecord) []byte {
	b := make([]byte, 0, 18+len(rec.Fingerprint)+len(rec.Reply))
	if rec.Expires.IsZero() {
		b = append(b, recordVersion)
		b = binary.BigEndian.AppendUint64(b, rec.Seq)
	} else {
		b = append(b, recordVersionExpiring)
		b = binary.BigEndian.AppendUint64(b, rec.Seq)
		b = append(b, EncodeTime(rec.Expires)...)
	}
	b = append(b, byte(len(rec.Fingerprint)))
	b = append(b, rec.Fingerprint...)
	return append(b, rec.Reply...)
}

func decodeRecord(v []byte) (RequestRecord, error) {
	var rec RequestRecord
	bad := fmt.Errorf("data: malformed request record")
	if len(v) < 10 {
		return rec, bad
	}
	rec.Seq = binary.BigEndian.Uint64(v[1:9])
	rest := v[9:]
	switch v[0] {
	case recordVersion:
	case recordVersionExpiring:
		if len(rest) < 9 {
			return rec, bad
		}
		rec.Expires = DecodeTime(rest[:8])
		rest = rest[8:]
	default:
		return rec, bad
	}
	n := int(rest[0])
	if len(rest) < 1+n {
		return rec, bad
	}
	rec.Fingerprint = string(rest[1 : 1+n])
	rec.Reply = bytes.Clone(rest[1+n:])
	return rec, nil
}

// Cursor is an opaque position in a booking listing.
type Cursor []byte

// ListBookings returns up to limit confirmed bookings of calID that overlap
// [from, to), ordered by start, beginning after the position after (nil for
// the first page). next is non-nil when more may follow. A limit of zero or
// less means no limit.
func (t *Tx) ListBookings(calID string, from, to time.Time, limit int, after Cursor) (out []Booking, next Cursor, err error) {
	slots := t.calSub(calID, iSlots)
	if slots == nil {
		return nil, nil, nil
	}
	c := slots.Cursor()
	var k, v []byte
	if after != nil {
		k, v = c.Seek(after)
		if k != nil && bytes.Equal(k, after) {
			k, v = c.Next()
		}
	} else {
		// A booking that starts before from reaches into the range only if
		// it is no longer than the calendar's longest.
		cb, _ := t.calBucket(calID, false)
		k, v = c.Seek(seekKey(from.Add(-t.maxSpan(calID, cb))))
	}
	toKey := seekKey(to)
	for ; k != nil; k, v = c.Next() {
		if bytes.Compare(k[:8], toKey) >= 0 {
			break
		}
		if s := decodeSlot(k, v); s.Hold || !s.End.After(from) {
			continue
		}
		if limit > 0 && len(out) == limit {
			return out, Cursor(out[len(out)-1].slotKey()), nil
		}
		bk, err := t.Booking(calID, string(k[8:]))
		if err != nil {
			return nil, nil, fmt.Errorf("data: slot %x without booking: %w", k, err)
		}
		out = append(out, bk)
	}
	return out, nil, nil
}

func (b Booking) slotKey() []byte { return slotKey(b.Start, b.ID) }

// ForEachConfirmed calls fn for every confirmed booking interval of calID in
// start order.
func (t *Tx) ForEachConfirmed(calID string, fn func(id string, iv Interval) error) error {
	slots := t.calSub(calID, iSlots)
	if slots == nil {
		return nil
	}
	return slots.ForEach(func(k, v []byte) error {
		if k == nil || v == nil || len(k) < 8 {
			return nil
		}
		if s := decodeSlot(k, v); !s.Hold {
			return fn(s.ID, s.Interval())
		}
		return nil
	})
}

// ForEachSlot calls fn for every entry of calID's slot index (confirmed
// bookings and holds, expired or not) in start order.
func (t *Tx) ForEachSlot(calID string, fn func(SlotEntry) error) error {
	slots := t.calSub(calID, iSlots)
	if slots == nil {
		return nil
	}
	return slots.ForEach(func(k, v []byte) error {
		if len(k) < 8 || v == nil {
			return nil
		}
		return fn(decodeSlot(k, v))
	})
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
	b := t.calSub(calID, iBookings)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		bk, err := decodeBooking(v)
		if err != nil {
			return fmt.Errorf("data: booking %s: %w", k, err)
		}
		return fn(bk)
	})
}

// CalendarIDs lists every calendar id in byte order.
func (t *Tx) CalendarIDs() []string {
	var ids []string
	_ = t.tx.Bucket(bucketCalendars).ForEach(func(k, _ []byte) error {
		ids = append(ids, string(k))
		return nil
	})
	return ids
}
