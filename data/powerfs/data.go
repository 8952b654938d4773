package powerfs

import (
	"errors"
	"io"
	"sync"

	"golang.org/x/sys/unix"
)

// pageSize is the granularity at which old file content is saved. Saving
// whole pages keeps the bookkeeping a map lookup per page; a small write
// saves at most two pages more than it overwrites.
const pageSize = 4096

// fileUndo is the undo log of one backing inode: what the file held at its
// last sync. It is only meaningful while dirty; a sync empties it.
type fileUndo struct {
	mu sync.Mutex
	// dirty says the file changed since its last sync (or since the
	// mount, or since it was created).
	dirty bool
	// durableSize is the file's size at its last sync.
	durableSize int64
	// pages maps a page index to the bytes that page held at the last
	// sync, clipped to durableSize. Every page below durableSize whose
	// content may have changed since the sync is in here.
	pages map[int64][]byte
	// saved is the number of bytes held in pages.
	saved int64
}

// begin starts a change of the file behind fd: the first change after a sync
// records the durable size, which is the current one since nothing changed
// since the sync. The caller holds u.mu.
func (u *fileUndo) begin(fd int) error {
	if u.dirty {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	u.dirty = true
	u.durableSize = st.Size
	u.pages = nil
	u.saved = 0
	return nil
}

// save records the durable content of [off, off+n) before it is changed
// through fd. Bytes at or beyond the durable size need no saving: a revert
// cuts them off. The caller holds u.mu and has called begin.
func (u *fileUndo) save(fd int, off, n int64) error {
	if off < 0 || n <= 0 || off >= u.durableSize {
		return nil
	}
	end := u.durableSize
	if n < end-off {
		end = off + n
	}
	for p := off / pageSize; p*pageSize < end; p++ {
		if _, ok := u.pages[p]; ok {
			continue
		}
		start := p * pageSize
		size := min(int64(pageSize), u.durableSize-start)
		buf := make([]byte, size)
		// A page not saved yet lies below the current size: every
		// shrink saved all pages it cut off. Should the read still be
		// short, the rest of the page was zeros.
		if _, err := preadFull(fd, buf, start); err != nil {
			return err
		}
		if u.pages == nil {
			u.pages = make(map[int64][]byte)
		}
		u.pages[p] = buf
		u.saved += size
	}
	return nil
}

// sync makes the file's current content durable. The caller holds u.mu.
func (u *fileUndo) sync() {
	u.dirty = false
	u.durableSize = 0
	u.pages = nil
	u.saved = 0
}

// revert restores the durable content into the file behind fd and returns
// how many bytes that changed: bytes cut off beyond the durable size plus
// bytes of saved pages that differ from what the file holds now.
func (u *fileUndo) revert(fd int) (lost int64, err error) {
	if !u.dirty {
		return 0, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if st.Size > u.durableSize {
		lost += st.Size - u.durableSize
	}
	cur := make([]byte, pageSize)
	for p, old := range u.pages {
		got, err := preadFull(fd, cur[:len(old)], p*pageSize)
		if err != nil {
			return lost, err
		}
		for i := range old {
			if i >= got || cur[i] != old[i] {
				lost++
			}
		}
	}
	if err := unix.Ftruncate(fd, u.durableSize); err != nil {
		return lost, err
	}
	for p, old := range u.pages {
		if err := pwriteFull(fd, old, p*pageSize); err != nil {
			return lost, err
		}
	}
	u.sync()
	return lost, nil
}

// preadFull reads len(buf) bytes at off, or up to the end of the file, and
// returns how many it read; the rest of buf is zeroed.
func preadFull(fd int, buf []byte, off int64) (int, error) {
	got := 0
	for got < len(buf) {
		n, err := unix.Pread(fd, buf[got:], off+int64(got))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return got, err
		}
		if n == 0 {
			break
		}
		got += n
	}
	clear(buf[got:])
	return got, nil
}

func pwriteFull(fd int, buf []byte, off int64) error {
	for len(buf) > 0 {
		n, err := unix.Pwrite(fd, buf, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		buf = buf[n:]
		off += int64(n)
	}
	return nil
}
