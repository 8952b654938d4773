package data

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Sentinel errors of the data package.
var (
	// ErrClosed is returned by Commit and View after Close.
	ErrClosed = errors.New("data: store closed")
	// ErrNotFound is returned by lookups of a missing calendar or booking.
	ErrNotFound = errors.New("data: not found")
	// ErrSchema is returned by Open for a file written by an incompatible version.
	ErrSchema = errors.New("data: incompatible index schema")
)

// schemaVersion is bumped on any change of the on-disk layout.
const schemaVersion = "5"

var (
	bucketMeta      = []byte("meta")
	bucketApplied   = []byte("applied")
	bucketCalendars = []byte("calendars")
	// cal/<id>: a bucket per calendar with busy blocks (busy.go);
	// bookings, slots and request records are in the shared trees of
	// tree.go, and the calendars that have any in bucketSpan.
	bucketCal = []byte("cal")

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

	// filters, when set (TrackKeys), hold every key of the bookings and
	// request trees; only the commit goroutine touches them.
	filters [3]*keyFilter
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
	// pending, when set, keeps the transaction's tree writes (see
	// CommitPending); such a request is committed alone.
	pending *Pending
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
		// Map 16 GiB of address space up front (1 GiB on 32-bit; the file
		// still grows only as needed, and pages not read cost no memory):
		// below that size a growing index is never remapped. A remap
		// costs the writer a munmap/mmap in the shared transaction and
		// waits for every open read transaction, such as a snapshot's.
		InitialMmapSize: initialMmapSize,
	})
	if err != nil {
		return nil, fmt.Errorf("data: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketApplied, bucketCalendars, bucketCal, bucketSpan, treeBookings, treeSlots, treeRequests} {
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
	return closedAsErrClosed(s.db.View(func(btx *bolt.Tx) error {
		if err := s.vis.wait(uint64(btx.ID())); err != nil {
			return err
		}
		return fn(&Tx{tx: btx, cals: &s.cals})
	}))
}

// closedAsErrClosed turns bbolt's error for a read after Close into
// ErrClosed, the one error of a closed store: a reader racing a shutdown
// is told the store is gone, not that something broke.
func closedAsErrClosed(err error) error {
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
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
	return ran, closedAsErrClosed(err)
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
	return s.submit(&commitReq{fn: fn, err: make(chan error, 1), nosync: nosync, durable: durable})
}

func (s *Store) submit(r *commitReq) error {
	// Checked first because a select with both cases ready picks one at
	// random: without this, a Commit after Close could enqueue anyway.
	select {
	case <-s.quit:
		return ErrClosed
	default:
	}
	select {
	case s.reqs <- r:
	case <-s.quit:
		return ErrClosed
	}
	return s.Await(r.err)
}

// TrackKeys keeps, from now on, a filter of the keys of the bookings and
// request trees for about keys keys, so that lookups of new request ids
// and booking ids, nearly every lookup of a replay, are answered without
// walking the trees. The index must hold no bookings or
// request records yet: the filter must know every key there is. It stays
// until ForgetKeys and costs 1.5 bytes per key.
func (s *Store) TrackKeys(keys int) error {
	return s.Commit(func(tx *Tx) error {
		for _, i := range []int{iBookings, iRequests} {
			if k, _ := tx.tx.Bucket(treeNames[i]).Cursor().First(); k != nil {
				return fmt.Errorf("data: TrackKeys on an index with %s keys", treeNames[i])
			}
			s.filters[i] = newKeyFilter(keys)
		}
		return nil
	})
}

// ForgetKeys drops the filters of TrackKeys.
func (s *Store) ForgetKeys() error {
	return s.Commit(func(*Tx) error { s.filters = [3]*keyFilter{}; return nil })
}

// initialMmapSize is the address space mapped for the index at Open.
var initialMmapSize = func() int {
	if strconv.IntSize == 64 {
		return 16 << 30
	}
	return 1 << 30
}()

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
		var alone *commitReq // a CommitPending, which shares no transaction
	drain:
		for len(group) < maxGroup && first.pending == nil {
			select {
			case r := <-s.reqs:
				if r.pending != nil {
					alone = r
					break drain
				}
				group = append(group, r)
			default:
				break drain
			}
		}
		s.commitGroup(group)
		if alone != nil {
			s.commitGroup([]*commitReq{alone})
		}
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
		tx := &Tx{tx: btx, cals: &s.cals, buffered: true, filters: &s.filters, pending: group[0].pending}
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
		// A CommitPending's writes stay in its Pending for FlushPending.
		if tx.pending == nil {
			if err := tx.flushRuns(); err != nil {
				_ = btx.Rollback()
				for _, r := range group {
					r.err <- err
				}
				return
			}
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
