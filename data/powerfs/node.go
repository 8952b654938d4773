package powerfs

import (
	"context"
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
