package powerfs

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Directory entries: create, link, remove, rename and list names, each
// logged (ns.go) so that a power cut can undo what was not made durable.

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
