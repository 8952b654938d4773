package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// logSync makes what the embedded server has written of one stream durable,
// one sync at a time for everyone who asks meanwhile (group commit for the
// log).
//
// Why this is enough: on a stream with one replica, nats-server's file store
// writes every message to its block file (write(2), "flush in place") before
// it acknowledges the publish, and so before any consumer can receive it.
// Every message a writer has received is therefore in the OS's page cache,
// and an fdatasync of the stream's newest block files started after that
// puts it on disk. The server's own SyncAlways would fsync each message on
// its own under the stream's lock instead (docs/architecture.md,
// "Durability", has the figures).
//
// Which files: the blocks are <n>.blk in the stream's msgs directory, n
// counting up; messages are appended to the newest. A sync fdatasyncs the
// newest block; when a newer one appeared (or the directory changed
// otherwise), every block from the last synced one on, and the directory, so
// that the new files' names are durable too. Everything before is synced
// once when the node starts (syncTree).
//
// An fsync that fails is not retried: after a failed fsync the kernel may
// have dropped the dirty pages, so a later success proves nothing. The error
// sticks, every waiter gets it, the writers stop committing and the node
// reports not ready until it is restarted and recovers from what is on disk
// (PostgreSQL does the same).
type logSync struct {
	dir string // the stream's msgs directory
	log *slog.Logger
	// observe, when set, is told how long each sync took.
	observe func(time.Duration)

	mu   sync.Mutex
	cond *sync.Cond
	// started and done count syncs; want is the newest sync anybody waits
	// for. A request made while sync k runs needs sync k+1: k may have
	// started before the request's data was written, unless the stream's
	// last sequence when k started says otherwise (durable, lastSeq).
	started, done, want uint64
	// lastSeq, when set, reads the stream's last sequence. The file store
	// updates it only after the message is written, so every message up
	// to the value read before a sync starts is covered by that sync, and
	// durable is the highest such value of a finished sync.
	lastSeq func() (uint64, bool)
	durable uint64
	// running is the last sequence read at the start of the sync that
	// runs now (0: none running, or unknown).
	running uint64
	err     error
	closed  bool
	exited  chan struct{}
	// reset asks the sync goroutine to forget the block it keeps open
	// and list the directory again (reopen).
	reset bool

	// Owned by the sync goroutine.
	cur    *os.File // the newest block
	curIdx uint64
	dirMod time.Time // the directory's mtime when it was last listed
}

// ErrLogSyncClosed is returned to waiters when the syncer stops before their
// sync ran.
var ErrLogSyncClosed = errors.New("queue: log sync stopped")

// errLogSyncFailed marks the error of a failed sync: fatal, never a
// storage fault that retrying heals (see storage.go).
var errLogSyncFailed = errors.New("queue: fsync of the command log failed")

// embeddedLastSeq reads a stream's last sequence from the embedded server
// without a round trip (a few microseconds).
func embeddedLastSeq(ns *server.Server, stream string) func() (uint64, bool) {
	return func() (uint64, bool) {
		z, err := ns.Jsz(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true})
		if err != nil {
			return 0, false
		}
		for _, a := range z.AccountDetails {
			for _, st := range a.Streams {
				if st.Name == stream {
					return st.State.LastSeq, true
				}
			}
		}
		return 0, false
	}
}

// streamMsgsDir is where the embedded server keeps a stream's block files.
func streamMsgsDir(storeDir, stream string) string {
	return filepath.Join(storeDir, server.JetStreamStoreDir, server.DEFAULT_GLOBAL_ACCOUNT, "streams", stream, "msgs")
}

func newLogSync(dir string, log *slog.Logger, observe func(time.Duration), lastSeq func() (uint64, bool)) *logSync {
	l := &logSync{dir: dir, log: log, observe: observe, lastSeq: lastSeq, exited: make(chan struct{})}
	l.cond = sync.NewCond(&l.mu)
	go l.run()
	return l
}

// Request asks for a sync that covers everything written before the call
// and returns the function that waits for it (nil once it is durable).
func (l *logSync) Request() func() error { return l.RequestSeq(0) }

// RequestSeq is Request for a caller that knows the newest stream sequence
// it needs durable: a sync already running may cover it (see lastSeq),
// which saves waiting for the next one. 0 means unknown.
func (l *logSync) RequestSeq(seq uint64) func() error {
	l.mu.Lock()
	if seq > 0 && seq <= l.durable && l.err == nil {
		l.mu.Unlock()
		return func() error { return nil }
	}
	gen := l.started + 1
	if seq > 0 && seq <= l.running {
		gen = l.started // the running sync covers it
	} else if gen > l.want {
		l.want = gen
		l.cond.Broadcast()
	}
	l.mu.Unlock()
	return func() error { return l.wait(gen, seq) }
}

func (l *logSync) wait(gen, seq uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	covered := func() bool { return l.done >= gen || seq > 0 && seq <= l.durable }
	for !covered() && l.err == nil && !l.closed {
		l.cond.Wait()
	}
	switch {
	case l.err != nil:
		return l.err
	case !covered():
		return ErrLogSyncClosed
	}
	return nil
}

// Err is the failure that stopped the syncer, if any.
func (l *logSync) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// reopen makes the next sync list the stream's directory again and sync
// every block from the last one it synced on, rather than only the block
// it keeps open: after the server reopened the stream (a reload of
// JetStream), the open descriptor may no longer be the file the stream
// writes to.
func (l *logSync) reopen() {
	l.mu.Lock()
	l.reset = true
	l.mu.Unlock()
}

// Close stops the syncer; waiters of syncs that did not run get
// ErrLogSyncClosed.
func (l *logSync) Close() {
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	<-l.exited
	if l.cur != nil {
		l.cur.Close()
	}
}

func (l *logSync) run() {
	defer close(l.exited)
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		for l.want <= l.started && !l.closed {
			l.cond.Wait()
		}
		if l.closed {
			return
		}
		l.started++
		gen, failed, reset := l.started, l.err != nil, l.reset
		l.reset = false
		l.mu.Unlock()
		if reset && l.cur != nil {
			// curIdx stays: the blocks from it on are synced again.
			l.cur.Close()
			l.cur = nil
		}
		var (
			err    error
			last   uint64
			lastOK bool
		)
		if !failed {
			if l.lastSeq != nil {
				last, lastOK = l.lastSeq() // before the sync starts
				if lastOK {
					l.mu.Lock()
					l.running = last
					l.mu.Unlock()
				}
			}
			began := time.Now()
			err = l.syncOnce()
			if l.observe != nil {
				l.observe(time.Since(began))
			}
		}
		l.mu.Lock()
		if err != nil && l.err == nil {
			l.err = fmt.Errorf("%w, nothing more is committed until bookline restarts: %w", errLogSyncFailed, err)
			l.log.Error("FSYNC FAILED: the writers stop; restart bookline to recover from what is on disk", "dir", l.dir, "err", err)
		}
		if err == nil && lastOK {
			l.durable = max(l.durable, last)
		}
		l.running = 0
		l.done = gen
		l.cond.Broadcast()
	}
}

// syncOnce makes every block write issued before it started durable.
func (l *logSync) syncOnce() error {
	fi, err := os.Stat(l.dir)
	if err != nil {
		return err
	}
	if l.cur == nil || !fi.ModTime().Equal(l.dirMod) {
		return l.rescan(fi.ModTime())
	}
	// The common case: no new block since the last sync. The check for the
	// next block's name covers a new block created within the directory
	// timestamp's granularity.
	if _, err := os.Lstat(filepath.Join(l.dir, strconv.FormatUint(l.curIdx+1, 10)+".blk")); err == nil {
		return l.rescan(fi.ModTime())
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fdatasync(l.cur)
}

// rescan syncs every block from the last synced one on, and the directory,
// and makes the newest block the one to sync from now on. mod is the
// directory's mtime read before the listing, so a change during it is
// seen again next time.
func (l *logSync) rescan(mod time.Time) error {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return err
	}
	var idx []uint64
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), ".blk")
		if !ok {
			continue
		}
		i, err := strconv.ParseUint(n, 10, 64)
		if err != nil {
			continue
		}
		if i >= l.curIdx { // curIdx 0: nothing synced yet (blocks count from 1)
			idx = append(idx, i)
		}
	}
	var newest uint64
	for _, i := range idx {
		if err := syncFile(filepath.Join(l.dir, strconv.FormatUint(i, 10)+".blk")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		newest = max(newest, i)
	}
	if err := syncPath(l.dir); err != nil {
		return err
	}
	if len(idx) == 0 {
		// No block yet (an empty stream): nothing to keep open.
		l.dirMod = mod
		return nil
	}
	if l.cur == nil || newest != l.curIdx {
		f, err := os.Open(filepath.Join(l.dir, strconv.FormatUint(newest, 10)+".blk"))
		if err != nil {
			return err
		}
		if l.cur != nil {
			l.cur.Close()
		}
		l.cur, l.curIdx = f, newest
	}
	l.dirMod = mod
	return nil
}

func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

// syncFile fdatasyncs the file at path (another descriptor's writes
// included: the page cache belongs to the file, not to the descriptor).
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return fdatasync(f)
}

// syncPath fsyncs a file or directory.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// syncTree fsyncs every file and directory under root, and root's parents up
// to stop: what the server wrote before this process took over (stream
// creation, earlier sessions) is durable before anything is answered.
func syncTree(root, stop string) error {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile (a consumer, a temp file)
			}
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		if err := syncPath(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	for dir := filepath.Dir(root); ; dir = filepath.Dir(dir) {
		if err := syncPath(dir); err != nil {
			return err
		}
		if dir == stop || dir == filepath.Dir(dir) || !strings.HasPrefix(dir, stop) {
			return nil
		}
	}
}
