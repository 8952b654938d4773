package powerfs

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a file, directory or symlink of the mount. Its StableAttr().Ino
// is the backing inode number; its backing path is found through the tree
// of nodes, which go-fuse keeps up to date across renames.
type node struct {
	gofs.Inode
	pfs *FS
}

var (
	_ gofs.NodeLookuper   = (*node)(nil)
	_ gofs.NodeGetattrer  = (*node)(nil)
	_ gofs.NodeSetattrer  = (*node)(nil)
	_ gofs.NodeOpener     = (*node)(nil)
	_ gofs.NodeCreater    = (*node)(nil)
	_ gofs.NodeMkdirer    = (*node)(nil)
	_ gofs.NodeMknoder    = (*node)(nil)
	_ gofs.NodeSymlinker  = (*node)(nil)
	_ gofs.NodeLinker     = (*node)(nil)
	_ gofs.NodeReadlinker = (*node)(nil)
	_ gofs.NodeUnlinker   = (*node)(nil)
	_ gofs.NodeRmdirer    = (*node)(nil)
	_ gofs.NodeRenamer    = (*node)(nil)
	_ gofs.NodeReaddirer  = (*node)(nil)
	_ gofs.NodeStatfser   = (*node)(nil)
	_ gofs.NodeFsyncer    = (*node)(nil)
)

func (n *node) ino() uint64 { return n.StableAttr().Ino }

// path returns the backing path of n, or ENOENT if n is not in the tree
// any more (unlinked while open).
func (n *node) path() (string, syscall.Errno) {
	var parts []string
	cur := &n.Inode
	for !cur.IsRoot() {
		name, parent := cur.Parent()
		if parent == nil {
			return "", syscall.ENOENT
		}
		parts = append(parts, name)
		cur = parent
	}
	p := n.pfs.backing
	for i := len(parts) - 1; i >= 0; i-- {
		p = filepath.Join(p, parts[i])
	}
	return p, 0
}

// verified returns the backing path of n from the tree, if it names n's
// inode, and its stat.
func (n *node) verified() (string, *syscall.Stat_t, bool) {
	p, errno := n.path()
	if errno != 0 {
		return "", nil, false
	}
	var st syscall.Stat_t
	if syscall.Lstat(p, &st) != nil || st.Ino != n.ino() {
		return "", nil, false
	}
	return p, &st, true
}

// resolve returns the backing path of n's own file, checked to be n's
// inode. A name the kernel looked up before a concurrent rename or unlink
// may mean another file by now, and an unlinked file that is still open
// (reopened through /proc, say) sits in the attic.
func (n *node) resolve() (string, syscall.Errno) {
	if p, _, ok := n.verified(); ok {
		return p, 0
	}
	// Wait for the namespace operation in flight, if any, and look
	// again.
	n.pfs.nsMu.Lock()
	defer n.pfs.nsMu.Unlock()
	return n.resolveLocked()
}

// resolveLocked is resolve for a caller that holds nsMu.
func (n *node) resolveLocked() (string, syscall.Errno) {
	if p, _, ok := n.verified(); ok {
		return p, 0
	}
	if name, ok := n.pfs.atticByIno[n.ino()]; ok {
		return filepath.Join(n.pfs.attic, name), 0
	}
	return "", syscall.ENOENT
}

// child returns the backing path of n's entry name. The attic is not
// reachable through the mount.
func (n *node) child(name string) (string, syscall.Errno) {
	if n.IsRoot() && name == atticName {
		return "", syscall.EPERM
	}
	p, errno := n.path()
	if errno != 0 {
		return "", errno
	}
	return filepath.Join(p, name), 0
}

// statGen stats path (or fd, if path is "") without following symlinks and
// returns a generation number for it from its birth time, so that an inode
// number the backing file system reuses is a new node to the kernel.
func statGen(fd int, path string) (syscall.Stat_t, uint64, error) {
	var x unix.Statx_t
	flags := unix.AT_SYMLINK_NOFOLLOW
	dirfd := unix.AT_FDCWD
	if path == "" {
		flags |= unix.AT_EMPTY_PATH
		dirfd = fd
	}
	if err := unix.Statx(dirfd, path, flags, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x); err != nil {
		return syscall.Stat_t{}, 0, err
	}
	st := syscall.Stat_t{
		Dev:     unix.Mkdev(x.Dev_major, x.Dev_minor),
		Ino:     x.Ino,
		Nlink:   uint64(x.Nlink),
		Mode:    uint32(x.Mode),
		Uid:     x.Uid,
		Gid:     x.Gid,
		Rdev:    unix.Mkdev(x.Rdev_major, x.Rdev_minor),
		Size:    int64(x.Size),
		Blksize: int64(x.Blksize),
		Blocks:  int64(x.Blocks),
		Atim:    syscall.Timespec{Sec: x.Atime.Sec, Nsec: int64(x.Atime.Nsec)},
		Mtim:    syscall.Timespec{Sec: x.Mtime.Sec, Nsec: int64(x.Mtime.Nsec)},
		Ctim:    syscall.Timespec{Sec: x.Ctime.Sec, Nsec: int64(x.Ctime.Nsec)},
	}
	gen := uint64(1)
	if x.Mask&unix.STATX_BTIME != 0 {
		gen = uint64(x.Btime.Sec)*1e9 + uint64(x.Btime.Nsec)
	}
	return st, gen, nil
}

// newChild returns the node for backing entry st, reusing the one the
// kernel already knows for the same inode.
func (n *node) newChild(ctx context.Context, st *syscall.Stat_t, gen uint64) *gofs.Inode {
	return n.NewInode(ctx, &node{pfs: n.pfs}, gofs.StableAttr{Mode: st.Mode & syscall.S_IFMT, Ino: st.Ino, Gen: gen})
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := n.pfs.enter(); errno != 0 {
		return nil, errno
	}
	defer n.pfs.leave()
	p, errno := n.child(name)
	if errno != 0 {
		return nil, syscall.ENOENT
	}
	st, gen, err := statGen(0, p)
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	out.Attr.FromStat(&st)
	return n.newChild(ctx, &st, gen), 0
}

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.pfs.enter(); errno != 0 {
		return errno
	}
	defer n.pfs.leave()
	var st syscall.Stat_t
	if h, ok := fh.(*handle); ok {
		if err := syscall.Fstat(h.fd, &st); err != nil {
			return gofs.ToErrno(err)
		}
	} else if _, vst, ok := n.verified(); ok {
		st = *vst
	} else {
		p, errno := n.resolve()
		if errno != 0 {
			return errno
		}
		if err := syscall.Lstat(p, &st); err != nil {
			return gofs.ToErrno(err)
		}
	}
	out.FromStat(&st)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := n.pfs.enter(); errno != 0 {
		return errno
	}
	defer n.pfs.leave()
	fd := -1
	var p string
	if h, ok := fh.(*handle); ok {
		fd = h.fd
	} else {
		var errno syscall.Errno
		if p, errno = n.resolve(); errno != 0 {
			return errno
		}
	}
	if size, ok := in.GetSize(); ok {
		if fd < 0 {
			// truncate(2) by name: the undo log needs to read
			// what the truncate cuts off.
			tfd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
			if err != nil {
				return gofs.ToErrno(err)
			}
			errno := n.pfs.truncate(n.ino(), tfd, int64(size))
			unix.Close(tfd)
			if errno != 0 {
				return errno
			}
		} else if errno := n.pfs.truncate(n.ino(), fd, int64(size)); errno != 0 {
			return errno
		}
	}
	if mode, ok := in.GetMode(); ok {
		var err error
		if fd >= 0 {
			err = unix.Fchmod(fd, mode)
		} else {
			err = unix.Chmod(p, mode)
		}
		if err != nil {
			return gofs.ToErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		var err error
		if fd >= 0 {
			err = unix.Fchown(fd, u, g)
		} else {
			err = unix.Lchown(p, u, g)
		}
		if err != nil {
			return gofs.ToErrno(err)
		}
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
		}
		var err error
		if fd >= 0 {
			err = unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
		} else {
			err = unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return gofs.ToErrno(err)
		}
	}
	var st syscall.Stat_t
	var err error
	if fd >= 0 {
		err = syscall.Fstat(fd, &st)
	} else {
		err = syscall.Lstat(p, &st)
	}
	if err != nil {
		return gofs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

// backingFlags turns the flags of an open request into flags for the
// backing file. Writable files are opened read-write so that the undo log
// can read what a write overwrites. O_APPEND is dropped because writes come
// with their offset (the kernel computes the end of file) and pwrite on an
// O_APPEND file would ignore it. Sync flags are dropped: the kernel turns
// them into FSYNC requests, and the backing files' own durability does not
// matter.
func backingFlags(flags uint32) int {
	f := int(flags) &^ (unix.O_APPEND | unix.O_TRUNC | unix.O_CREAT | unix.O_EXCL |
		unix.O_SYNC | unix.O_DSYNC | unix.O_DIRECT | unix.O_NOCTTY | fuse.FMODE_EXEC)
	if f&unix.O_ACCMODE == unix.O_WRONLY {
		f = f&^unix.O_ACCMODE | unix.O_RDWR
	}
	return f | unix.O_CLOEXEC | unix.O_NOFOLLOW
}

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if errno := n.pfs.enter(); errno != 0 {
		return nil, 0, errno
	}
	defer n.pfs.leave()
	p, errno := n.resolve()
	if errno != 0 {
		return nil, 0, errno
	}
	return n.openBacking(p, flags)
}

// openBacking opens the backing file of n at p; the caller is inside
// enter.
func (n *node) openBacking(p string, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fd, err := unix.Open(p, backingFlags(flags), 0)
	if err != nil {
		return nil, 0, gofs.ToErrno(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, gofs.ToErrno(err)
	}
	if st.Ino != n.ino() {
		// The name now means another file than the kernel's node.
		unix.Close(fd)
		return nil, 0, syscall.ESTALE
	}
	if flags&unix.O_TRUNC != 0 {
		if errno := n.pfs.truncate(st.Ino, fd, 0); errno != 0 {
			unix.Close(fd)
			return nil, 0, errno
		}
	}
	return &handle{pfs: n.pfs, ino: st.Ino, fd: fd}, fuse.FOPEN_KEEP_CACHE, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if errno := n.pfs.enter(); errno != 0 {
		return nil, nil, 0, errno
	}
	defer n.pfs.leave()
	p, errno := n.child(name)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	f := n.pfs
	f.nsMu.Lock()
	fd, err := unix.Open(p, backingFlags(flags)|unix.O_CREAT|unix.O_EXCL, mode)
	if errors.Is(err, unix.EEXIST) && flags&unix.O_EXCL == 0 {
		// The kernel looks names up before it creates them, so
		// this takes a race with another creator: open what won.
		f.nsMu.Unlock()
		st, gen, err := statGen(0, p)
		if err != nil {
			return nil, nil, 0, gofs.ToErrno(err)
		}
		ch := n.newChild(ctx, &st, gen)
		fh, fl, errno := ch.Operations().(*node).openBacking(p, flags)
		if errno != 0 {
			return nil, nil, 0, errno
		}
		out.Attr.FromStat(&st)
		return ch, fh, fl, 0
	}
	if err != nil {
		f.nsMu.Unlock()
		return nil, nil, 0, gofs.ToErrno(err)
	}
	st, gen, err := statGen(fd, "")
	if err != nil {
		unix.Close(fd)
		unix.Unlink(p)
		f.nsMu.Unlock()
		return nil, nil, 0, gofs.ToErrno(err)
	}
	f.newInode(st.Ino)
	f.log(nsOp{kind: opCreate, dir: n.ino(), name: name, ino: st.Ino})
	f.nsMu.Unlock()
	out.Attr.FromStat(&st)
	return n.newChild(ctx, &st, gen), &handle{pfs: f, ino: st.Ino, fd: fd}, fuse.FOPEN_KEEP_CACHE, 0
}

// created logs the creation of name in n, done by mk, and returns its node.
func (n *node) created(ctx context.Context, name string, out *fuse.EntryOut, mk func(p string) error) (*gofs.Inode, syscall.Errno) {
	if errno := n.pfs.enter(); errno != 0 {
		return nil, errno
	}
	defer n.pfs.leave()
	p, errno := n.child(name)
	if errno != 0 {
		return nil, errno
	}
	f := n.pfs
	f.nsMu.Lock()
	defer f.nsMu.Unlock()
	if err := mk(p); err != nil {
		return nil, gofs.ToErrno(err)
	}
	st, gen, err := statGen(0, p)
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	isDir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR
	if st.Nlink == 1 || isDir {
		f.newInode(st.Ino)
	}
	f.log(nsOp{kind: opCreate, dir: n.ino(), name: name, ino: st.Ino, isDir: isDir})
	out.Attr.FromStat(&st)
	return n.newChild(ctx, &st, gen), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.created(ctx, name, out, func(p string) error { return unix.Mkdir(p, mode) })
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.created(ctx, name, out, func(p string) error { return unix.Mknod(p, mode, int(dev)) })
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.created(ctx, name, out, func(p string) error { return unix.Symlink(target, p) })
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	return n.created(ctx, name, out, func(p string) error {
		// created holds nsMu. A file that is open but unlinked
		// links from its copy in the attic.
		tp, errno := t.resolveLocked()
		if errno != 0 {
			return errno
		}
		return unix.Link(tp, p)
	})
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	if errno := n.pfs.enter(); errno != 0 {
		return nil, errno
	}
	defer n.pfs.leave()
	p, errno := n.resolve()
	if errno != 0 {
		return nil, errno
	}
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		got, err := unix.Readlink(p, buf)
		if err != nil {
			return nil, gofs.ToErrno(err)
		}
		if got < size {
			return buf[:got], 0
		}
	}
}

// remove moves name out of n into the attic and logs it; wantDir says
// whether it is rmdir.
func (n *node) remove(name string, wantDir bool) syscall.Errno {
	if errno := n.pfs.enter(); errno != 0 {
		return errno
	}
	defer n.pfs.leave()
	p, errno := n.child(name)
	if errno != 0 {
		return syscall.ENOENT
	}
	f := n.pfs
	f.nsMu.Lock()
	defer f.nsMu.Unlock()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return gofs.ToErrno(err)
	}
	isDir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR
	switch {
	case wantDir && !isDir:
		return syscall.ENOTDIR
	case !wantDir && isDir:
		return syscall.EISDIR
	case isDir:
		if errno := emptyDir(p); errno != 0 {
			return errno
		}
	}
	slot, ap := f.atticSlot()
	if err := unix.Rename(p, ap); err != nil {
		return gofs.ToErrno(err)
	}
	f.atticByIno[st.Ino] = slot
	f.log(nsOp{kind: opRemove, dir: n.ino(), name: name, ino: st.Ino, isDir: isDir, attic: slot})
	return 0
}

// emptyDir returns ENOTEMPTY unless directory p is empty.
func emptyDir(p string) syscall.Errno {
	d, err := os.Open(p)
	if err != nil {
		return gofs.ToErrno(err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if len(names) > 0 {
		return syscall.ENOTEMPTY
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return gofs.ToErrno(err)
	}
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno { return n.remove(name, false) }

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno { return n.remove(name, true) }

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if errno := n.pfs.enter(); errno != 0 {
		return errno
	}
	defer n.pfs.leave()
	from, errno := n.child(name)
	if errno != 0 {
		return syscall.ENOENT
	}
	to, errno := np.child(newName)
	if errno != 0 {
		return errno
	}
	f := n.pfs
	f.nsMu.Lock()
	defer f.nsMu.Unlock()
	var src, dst unix.Stat_t
	if err := unix.Lstat(from, &src); err != nil {
		return gofs.ToErrno(err)
	}
	srcDir := src.Mode&syscall.S_IFMT == syscall.S_IFDIR
	dstErr := unix.Lstat(to, &dst)
	if dstErr != nil && !errors.Is(dstErr, unix.ENOENT) {
		return gofs.ToErrno(dstErr)
	}
	exists := dstErr == nil
	dstDir := exists && dst.Mode&syscall.S_IFMT == syscall.S_IFDIR
	op := nsOp{kind: opRename, dir: n.ino(), name: name, ino: src.Ino, isDir: srcDir, dir2: np.ino(), name2: newName}

	switch {
	case flags&^(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) != 0,
		flags&unix.RENAME_NOREPLACE != 0 && flags&unix.RENAME_EXCHANGE != 0:
		return syscall.EINVAL
	case flags&unix.RENAME_EXCHANGE != 0:
		if !exists {
			return syscall.ENOENT
		}
		if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_EXCHANGE); err != nil {
			return gofs.ToErrno(err)
		}
		op.kind = opExchange
		op.ino2, op.isDir2 = dst.Ino, dstDir
		f.log(op)
		return 0
	case exists && flags&unix.RENAME_NOREPLACE != 0:
		return syscall.EEXIST
	case exists && dst.Ino == src.Ino:
		// Both names are links to one file: rename does nothing.
		return 0
	case exists && srcDir && !dstDir:
		return syscall.ENOTDIR
	case exists && !srcDir && dstDir:
		return syscall.EISDIR
	case dstDir:
		if errno := emptyDir(to); errno != 0 {
			return errno
		}
	}
	if exists {
		// Keep the replaced target in the attic, where undoing the
		// rename finds it.
		slot, ap := f.atticSlot()
		if err := unix.Rename(to, ap); err != nil {
			return gofs.ToErrno(err)
		}
		if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE); err != nil {
			unix.Rename(ap, to)
			return gofs.ToErrno(err)
		}
		op.ino2, op.isDir2, op.attic2 = dst.Ino, dstDir, slot
		f.atticByIno[dst.Ino] = slot
	} else if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE); err != nil {
		return gofs.ToErrno(err)
	}
	f.log(op)
	return 0
}

func (n *node) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	if errno := n.pfs.enter(); errno != 0 {
		return nil, errno
	}
	defer n.pfs.leave()
	p, errno := n.path()
	if errno != 0 {
		return nil, errno
	}
	d, err := os.Open(p)
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	defer d.Close()
	ents, err := d.ReadDir(-1)
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	list := make([]fuse.DirEntry, 0, len(ents))
	for _, e := range ents {
		if n.IsRoot() && e.Name() == atticName {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		de := fuse.DirEntry{Name: e.Name(), Ino: st.Ino, Mode: st.Mode & syscall.S_IFMT}
		list = append(list, de)
	}
	return gofs.NewListDirStream(list), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	if errno := n.pfs.enter(); errno != 0 {
		return errno
	}
	defer n.pfs.leave()
	var st syscall.Statfs_t
	if err := syscall.Statfs(n.pfs.backing, &st); err != nil {
		return gofs.ToErrno(err)
	}
	out.FromStatfsT(&st)
	return 0
}

// Fsync serves both FUSE_FSYNC (files) and FUSE_FSYNCDIR (directories).
// The backing files are not synced: only the model's durability matters.
func (n *node) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if errno := n.pfs.enter(); errno != 0 {
		return errno
	}
	defer n.pfs.leave()
	if n.Mode()&syscall.S_IFMT == syscall.S_IFDIR {
		n.pfs.fsyncDir(n.ino())
	} else {
		n.pfs.fsyncFile(n.ino())
	}
	return 0
}

// handle is an open backing file.
type handle struct {
	pfs *FS
	ino uint64
	fd  int
}

var (
	_ gofs.FileReader    = (*handle)(nil)
	_ gofs.FileWriter    = (*handle)(nil)
	_ gofs.FileWritever  = (*handle)(nil)
	_ gofs.FileReleaser  = (*handle)(nil)
	_ gofs.FileFlusher   = (*handle)(nil)
	_ gofs.FileAllocater = (*handle)(nil)
	_ gofs.FileLseeker   = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := h.pfs.enter(); errno != 0 {
		return nil, errno
	}
	defer h.pfs.leave()
	got, err := preadFull(h.fd, dest, off)
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:got]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	return h.Writev(ctx, [][]byte{data}, off)
}

func (h *handle) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	if errno := h.pfs.enter(); errno != 0 {
		return 0, errno
	}
	defer h.pfs.leave()
	n, errno := h.pfs.write(h.ino, h.fd, data, off)
	return uint32(n), errno
}

func (h *handle) Flush(ctx context.Context) syscall.Errno {
	if errno := h.pfs.enter(); errno != 0 {
		return errno
	}
	h.pfs.leave()
	return 0
}

// Release closes the backing file, also after the cut: the kernel releases
// the files of the killed process then.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	return gofs.ToErrno(unix.Close(h.fd))
}

func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if errno := h.pfs.enter(); errno != 0 {
		return errno
	}
	defer h.pfs.leave()
	return h.pfs.allocate(h.ino, h.fd, int64(off), int64(size), mode)
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	if errno := h.pfs.enter(); errno != 0 {
		return 0, errno
	}
	defer h.pfs.leave()
	got, err := unix.Seek(h.fd, int64(off), int(whence))
	return uint64(got), gofs.ToErrno(err)
}
