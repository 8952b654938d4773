package powerfs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Open files: the backing descriptor behind each FUSE handle; writes keep
// what they overwrite in the undo log until the file is fsynced.

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
