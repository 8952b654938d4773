package powerfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// atticName is the hidden directory in the backing root that holds what
// was removed until the removal is durable.
const atticName = ".powerfs-attic"

// Options tune a mount.
type Options struct {
	// Journaled relaxes the namespace model to that of a journaling
	// file system that commits all metadata in one transaction, such as
	// ext4 (data=ordered) or xfs: any fsync or fdatasync, of a file or
	// a directory, makes every namespace operation before it durable,
	// wherever it was. File data stays durable per file, as of its own
	// last sync. Without it the model is strict POSIX.
	Journaled bool
	// Debug logs every FUSE request and reply.
	Debug bool
}

// Stats are the counters of one mount.
type Stats struct {
	// Fsyncs counts FUSE_FSYNC requests (fsync and fdatasync of files)
	// served before the cut.
	Fsyncs int64
	// DirFsyncs counts FUSE_FSYNCDIR requests served before the cut.
	DirFsyncs int64
	// NamespaceOps counts namespace operations logged.
	NamespaceOps int64
	// PendingNamespaceOps is the number of namespace operations that are
	// not durable yet.
	PendingNamespaceOps int
	// UnsyncedBytes is the number of old file bytes currently held to
	// undo writes since the files' last syncs.
	UnsyncedBytes int64
	// Cut says whether Cut was called.
	Cut bool
	// LastRevert is what Revert did, once it ran.
	LastRevert RevertStats
}

// RevertStats say what a revert threw away.
type RevertStats struct {
	// BytesLost counts bytes of file content that changed back: bytes
	// cut off beyond a file's synced size, bytes of synced pages that
	// differed from the current content, and the size of regular files
	// whose creation was undone.
	BytesLost int64
	// FilesReverted counts files whose content was rolled back.
	FilesReverted int
	// NamespaceOpsUndone counts namespace operations undone.
	NamespaceOpsUndone int
}

// FS is one mount of the power-loss file system.
type FS struct {
	backing    string
	mountpoint string
	journaled  bool
	attic      string
	rootIno    uint64
	atticIno   uint64
	server     *fuse.Server

	// gate is held shared by every operation while it runs and
	// exclusively by Cut, so an operation either completes (and is in
	// the model) before the cut or fails with EIO.
	gate sync.RWMutex
	cut  bool

	// nsMu serializes namespace operations with their log, so the log's
	// order is the order in which they happened on the backing tree.
	nsMu     sync.Mutex
	ns       nsLog
	atticSeq uint64
	// atticByIno finds the attic entry of a backing inode, for a node
	// that is unlinked but still open.
	atticByIno map[uint64]string

	filesMu sync.Mutex
	files   map[uint64]*fileUndo

	fsyncs    atomic.Int64
	dirFsyncs atomic.Int64

	stateMu    sync.Mutex
	unmounted  bool
	reverted   bool
	lastRevert RevertStats
}

// Available returns nil if this process can mount FUSE file systems the way
// Mount does, and otherwise an error saying why not, for a test to skip
// with.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("powerfs: mounting needs root (mount(2) without fusermount)")
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("powerfs: cannot open /dev/fuse: %w", err)
	}
	unix.Close(fd)
	fss, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return fmt.Errorf("powerfs: %w", err)
	}
	for line := range strings.Lines(string(fss)) {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == "fuse" {
			return nil
		}
	}
	return errors.New("powerfs: the kernel has no fuse file system")
}

// Mount mounts a power-loss file system over backing at mountpoint. What
// backing holds now counts as durable. Both must be directories on which
// neither contains the other.
func Mount(backing, mountpoint string, opts Options) (*FS, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	// The root node's inode is the backing directory's own, not a
	// symlink's to it.
	if backing, err = filepath.EvalSymlinks(backing); err != nil {
		return nil, err
	}
	mountpoint, err = filepath.Abs(mountpoint)
	if err != nil {
		return nil, err
	}
	if within(backing, mountpoint) || within(mountpoint, backing) {
		return nil, fmt.Errorf("powerfs: backing %s and mount point %s must not contain each other", backing, mountpoint)
	}
	var st unix.Stat_t
	if err := unix.Stat(backing, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: backing, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fmt.Errorf("powerfs: backing %s is not a directory", backing)
	}
	f := &FS{
		backing:    backing,
		mountpoint: mountpoint,
		journaled:  opts.Journaled,
		attic:      filepath.Join(backing, atticName),
		rootIno:    st.Ino,
		files:      make(map[uint64]*fileUndo),
		atticByIno: make(map[uint64]string),
	}
	// An attic left over from a mount that was never reverted holds
	// nothing anyone can bring back any more.
	if err := os.RemoveAll(f.attic); err != nil {
		return nil, err
	}
	if err := os.Mkdir(f.attic, 0o700); err != nil {
		return nil, err
	}
	if err := unix.Lstat(f.attic, &st); err != nil {
		return nil, err
	}
	f.atticIno = st.Ino

	timeout := time.Second
	root := &node{pfs: f}
	// go-fuse's direct mount leaves its /dev/fuse descriptor
	// inheritable. A child that inherits it keeps the connection alive
	// after this process dies, and then hangs on its own requests
	// forever. Holding ForkLock keeps any fork from seeing it before it
	// is marked close-on-exec.
	syscall.ForkLock.RLock()
	server, err := gofs.Mount(mountpoint, root, &gofs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            backing,
			Name:              "powerfs",
			Debug:             opts.Debug,
			// Nothing here uses extended attributes; ENOSYS makes
			// the kernel stop asking (it asks for
			// security.capability on every write otherwise).
			DisableXAttrs: true,
			// Every change reaches the backing files through this
			// mount, so the page cache never goes stale behind the
			// kernel's back; don't let mtime changes drop it.
			ExplicitDataCacheControl: true,
			MaxWrite:                 1 << 20,
			// Writes must reach the model one by one as they
			// happen, and none may bypass it.
			DisabledCapabilities: fuse.CAP_WRITEBACK_CACHE | fuse.CAP_PASSTHROUGH,
		},
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		NullPermissions: true,
		RootStableAttr:  &gofs.StableAttr{Ino: f.rootIno, Gen: 1},
	})
	if err == nil {
		if err = closeFuseOnExec(); err != nil {
			f.server = server
			f.Unmount()
		}
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		os.RemoveAll(f.attic)
		return nil, fmt.Errorf("powerfs: mount %s: %w", mountpoint, err)
	}
	f.server = server
	return f, nil
}

// closeFuseOnExec marks every /dev/fuse descriptor of this process
// close-on-exec.
func closeFuseOnExec() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == "/dev/fuse" {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}

// within says whether p is dir or below it.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// Backing returns the backing directory.
func (f *FS) Backing() string { return f.backing }

// Mountpoint returns the mount point.
func (f *FS) Mountpoint() string { return f.mountpoint }

// Cut simulates the power cut: from now on nothing becomes durable and
// every operation on the mount fails with EIO. Operations in flight finish
// first.
func (f *FS) Cut() {
	f.gate.Lock()
	f.cut = true
	f.gate.Unlock()
}

// enter starts an operation: it fails with EIO after the cut. A nil return
// must be paired with leave.
func (f *FS) enter() syscall.Errno {
	f.gate.RLock()
	if f.cut {
		f.gate.RUnlock()
		return syscall.EIO
	}
	return 0
}

func (f *FS) leave() { f.gate.RUnlock() }

// Unmount unmounts the file system and waits for its server to exit. If
// the mount is busy (a killed process not reaped yet, a working directory
// inside it), it aborts the FUSE connection and detaches the mount.
func (f *FS) Unmount() error {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	if f.unmounted {
		return nil
	}
	err := unix.Unmount(f.mountpoint, 0)
	if err != nil && !errors.Is(err, unix.EINVAL) {
		// MNT_FORCE makes FUSE abort the connection, failing whatever
		// still waits on it; MNT_DETACH then takes the mount away
		// even if something still holds it.
		_ = unix.Unmount(f.mountpoint, unix.MNT_FORCE)
		err = unix.Unmount(f.mountpoint, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) {
			err = nil // the forced unmount already did it
		}
	} else {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("powerfs: unmount %s: %w", f.mountpoint, err)
	}
	f.server.Wait()
	f.unmounted = true
	return nil
}

// Revert makes the backing directory hold exactly the durable state: it
// undoes the namespace operations that were not durable, rolls back file
// content to the last syncs and empties the attic. It may only be called
// after Cut and Unmount, once.
func (f *FS) Revert() (RevertStats, error) {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	if !f.unmounted {
		return RevertStats{}, errors.New("powerfs: Revert before Unmount")
	}
	f.gate.RLock()
	cut := f.cut
	f.gate.RUnlock()
	if !cut {
		return RevertStats{}, errors.New("powerfs: Revert before Cut")
	}
	if f.reverted {
		return RevertStats{}, errors.New("powerfs: Revert called twice")
	}
	f.reverted = true

	var rs RevertStats
	var errs []error
	f.nsMu.Lock()
	pending := f.ns.pending
	f.ns.pending = nil
	f.ns.dead = nil
	f.nsMu.Unlock()

	if len(pending) > 0 {
		t, err := scanDirs(f.backing, f.rootIno)
		if err != nil {
			errs = append(errs, err)
		} else {
			seq := 0
			for i := len(pending) - 1; i >= 0; i-- {
				lost, err := f.undo(t, &pending[i], &seq)
				if err != nil {
					errs = append(errs, fmt.Errorf("undo %v: %w", &pending[i], err))
					continue
				}
				rs.BytesLost += lost
				rs.NamespaceOpsUndone++
			}
		}
	}

	f.filesMu.Lock()
	files := f.files
	f.files = make(map[uint64]*fileUndo)
	f.filesMu.Unlock()
	lost, n, err := f.revertData(files)
	rs.BytesLost += lost
	rs.FilesReverted = n
	if err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(f.attic); err != nil {
		errs = append(errs, err)
	}
	f.lastRevert = rs
	return rs, errors.Join(errs...)
}

// Stats returns the mount's counters.
func (f *FS) Stats() Stats {
	s := Stats{
		Fsyncs:    f.fsyncs.Load(),
		DirFsyncs: f.dirFsyncs.Load(),
	}
	f.nsMu.Lock()
	s.NamespaceOps = f.ns.logged
	s.PendingNamespaceOps = len(f.ns.pending)
	f.nsMu.Unlock()
	f.filesMu.Lock()
	files := make([]*fileUndo, 0, len(f.files))
	for _, u := range f.files {
		files = append(files, u)
	}
	f.filesMu.Unlock()
	for _, u := range files {
		u.mu.Lock()
		s.UnsyncedBytes += u.saved
		u.mu.Unlock()
	}
	f.gate.RLock()
	s.Cut = f.cut
	f.gate.RUnlock()
	f.stateMu.Lock()
	s.LastRevert = f.lastRevert
	f.stateMu.Unlock()
	return s
}

// undoFor returns the undo log of backing inode ino.
func (f *FS) undoFor(ino uint64) *fileUndo {
	f.filesMu.Lock()
	defer f.filesMu.Unlock()
	u := f.files[ino]
	if u == nil {
		u = &fileUndo{}
		f.files[ino] = u
	}
	return u
}

// newInode forgets what was known about a backing inode number that now
// names a new file: the old one was deleted for real.
func (f *FS) newInode(ino uint64) {
	f.filesMu.Lock()
	delete(f.files, ino)
	f.filesMu.Unlock()
}

// write writes data at off to the file behind fd, backing inode ino,
// saving what it overwrites first.
func (f *FS) write(ino uint64, fd int, data [][]byte, off int64) (int, syscall.Errno) {
	var n int64
	for _, b := range data {
		n += int64(len(b))
	}
	u := f.undoFor(ino)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.begin(fd); err != nil {
		return 0, gofs.ToErrno(err)
	}
	if err := u.save(fd, off, n); err != nil {
		return 0, gofs.ToErrno(err)
	}
	var written int
	var err error
	for {
		if len(data) == 1 {
			written, err = unix.Pwrite(fd, data[0], off)
		} else {
			written, err = unix.Pwritev(fd, data, off)
		}
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	return max(written, 0), gofs.ToErrno(err)
}

// truncate sets the size of the file behind fd, backing inode ino.
func (f *FS) truncate(ino uint64, fd int, size int64) syscall.Errno {
	u := f.undoFor(ino)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.begin(fd); err != nil {
		return gofs.ToErrno(err)
	}
	if err := u.save(fd, size, u.durableSize-size); err != nil {
		return gofs.ToErrno(err)
	}
	return gofs.ToErrno(unix.Ftruncate(fd, size))
}

// allocate runs fallocate on the file behind fd, backing inode ino.
func (f *FS) allocate(ino uint64, fd int, off, size int64, mode uint32) syscall.Errno {
	if mode&^(unix.FALLOC_FL_KEEP_SIZE|unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0 {
		// Collapsing and inserting ranges shift content; nothing
		// here needs them.
		return syscall.EOPNOTSUPP
	}
	u := f.undoFor(ino)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.begin(fd); err != nil {
		return gofs.ToErrno(err)
	}
	if mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0 {
		if err := u.save(fd, off, size); err != nil {
			return gofs.ToErrno(err)
		}
	}
	return gofs.ToErrno(unix.Fallocate(fd, mode, off, size))
}

// fsyncFile makes the content of backing inode ino durable, and in
// journaled mode every namespace operation so far.
func (f *FS) fsyncFile(ino uint64) {
	f.filesMu.Lock()
	u := f.files[ino]
	f.filesMu.Unlock()
	if u != nil {
		u.mu.Lock()
		u.sync()
		u.mu.Unlock()
	}
	if f.journaled {
		f.nsMu.Lock()
		f.ns.commit()
		f.collect()
		f.nsMu.Unlock()
	}
	f.fsyncs.Add(1)
}

// fsyncDir makes the entries of directory ino durable, or in journaled
// mode every namespace operation so far.
func (f *FS) fsyncDir(ino uint64) {
	f.nsMu.Lock()
	if f.journaled {
		f.ns.commit()
	} else {
		f.ns.fsyncDir(ino)
	}
	f.collect()
	f.nsMu.Unlock()
	f.dirFsyncs.Add(1)
}

// collect deletes from the attic what no pending operation can bring back
// any more; the caller holds nsMu.
func (f *FS) collect() {
	for _, e := range f.ns.collectable() {
		if f.atticByIno[e.ino] == e.name {
			delete(f.atticByIno, e.ino)
		}
		p := filepath.Join(f.attic, e.name)
		if e.isDir {
			os.RemoveAll(p)
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Nlink == 1 {
			f.newInode(st.Ino)
		}
		unix.Unlink(p)
	}
}

// log records a namespace operation; the caller holds nsMu.
func (f *FS) log(op nsOp) { f.ns.add(op) }

// atticSlot returns a fresh name in the attic; the caller holds nsMu.
func (f *FS) atticSlot() (name, path string) {
	f.atticSeq++
	name = fmt.Sprintf("%d", f.atticSeq)
	return name, filepath.Join(f.attic, name)
}
