package powerfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// dirTree locates directories of the backing tree by inode number while the
// revert moves them around.
type dirTree struct {
	rootIno uint64
	root    string
	loc     map[uint64]dirLoc
}

type dirLoc struct {
	parent uint64
	name   string
}

// scanDirs records where every directory under root is, the attic included.
func scanDirs(root string, rootIno uint64) (*dirTree, error) {
	t := &dirTree{rootIno: rootIno, root: root, loc: make(map[uint64]dirLoc)}
	inoOf := map[string]uint64{root: rootIno}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || p == root {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		inoOf[p] = st.Ino
		t.loc[st.Ino] = dirLoc{parent: inoOf[filepath.Dir(p)], name: filepath.Base(p)}
		return nil
	})
	return t, err
}

func (t *dirTree) path(ino uint64) (string, error) {
	var parts []string
	for ino != t.rootIno {
		l, ok := t.loc[ino]
		if !ok {
			return "", fmt.Errorf("directory inode %d not found", ino)
		}
		if len(parts) > 1<<12 {
			return "", fmt.Errorf("directory inode %d: loop", ino)
		}
		parts = append(parts, l.name)
		ino = l.parent
	}
	p := t.root
	for i := len(parts) - 1; i >= 0; i-- {
		p = filepath.Join(p, parts[i])
	}
	return p, nil
}

func (t *dirTree) entry(dir uint64, name string) (string, error) {
	p, err := t.path(dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(p, name), nil
}

// move renames (dir, name), which must be inode ino, to (dir2, name2),
// which must not exist.
func (t *dirTree) move(dir uint64, name string, ino uint64, dir2 uint64, name2 string) error {
	from, err := t.entry(dir, name)
	if err != nil {
		return err
	}
	to, err := t.entry(dir2, name2)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(from, &st); err != nil {
		return err
	}
	if st.Ino != ino {
		return fmt.Errorf("%s is inode %d, want %d", from, st.Ino, ino)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		t.loc[ino] = dirLoc{parent: dir2, name: name2}
	}
	return nil
}

// undo reverts one pending operation; the operations after it are already
// undone or touch nothing it touched, so what it did is still in place.
// It returns the bytes of regular files that disappear with it.
func (f *FS) undo(t *dirTree, op *nsOp, seq *int) (lost int64, err error) {
	toAttic := func(dir uint64, name string, ino uint64) error {
		*seq++
		return t.move(dir, name, ino, f.atticIno, fmt.Sprintf("undo-%d", *seq))
	}
	switch op.kind {
	case opCreate:
		p, err := t.entry(op.dir, op.name)
		if err != nil {
			return 0, err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Nlink == 1 {
			lost = st.Size
		}
		// A directory that is not empty any more goes to the attic
		// with what is in it: without its entry it is unreachable.
		return lost, toAttic(op.dir, op.name, op.ino)
	case opRemove:
		return 0, t.move(f.atticIno, op.attic, op.ino, op.dir, op.name)
	case opRename:
		if err := t.move(op.dir2, op.name2, op.ino, op.dir, op.name); err != nil {
			return 0, err
		}
		if op.ino2 != 0 {
			return 0, t.move(f.atticIno, op.attic2, op.ino2, op.dir2, op.name2)
		}
		return 0, nil
	case opExchange:
		a, err := t.entry(op.dir, op.name)
		if err != nil {
			return 0, err
		}
		b, err := t.entry(op.dir2, op.name2)
		if err != nil {
			return 0, err
		}
		var sa, sb unix.Stat_t
		if err := unix.Lstat(a, &sa); err != nil {
			return 0, err
		}
		if err := unix.Lstat(b, &sb); err != nil {
			return 0, err
		}
		if sa.Ino != op.ino2 || sb.Ino != op.ino {
			return 0, fmt.Errorf("exchange of %s and %s: found inodes %d and %d, want %d and %d", a, b, sa.Ino, sb.Ino, op.ino2, op.ino)
		}
		if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
			return 0, &os.LinkError{Op: "exchange", Old: a, New: b, Err: err}
		}
		if op.isDir {
			t.loc[op.ino] = dirLoc{parent: op.dir, name: op.name}
		}
		if op.isDir2 {
			t.loc[op.ino2] = dirLoc{parent: op.dir2, name: op.name2}
		}
		return 0, nil
	}
	return 0, fmt.Errorf("unknown operation %v", op.kind)
}

// revertData rolls back the content of every changed file that is still
// reachable in the visible tree.
func (f *FS) revertData(files map[uint64]*fileUndo) (lost int64, reverted int, err error) {
	todo := make(map[uint64]*fileUndo)
	for ino, u := range files {
		if u.dirty {
			todo[ino] = u
		}
	}
	if len(todo) == 0 {
		return 0, 0, nil
	}
	var errs []error
	walkErr := filepath.WalkDir(f.backing, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p == f.attic {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		u := todo[st.Ino]
		if u == nil {
			return nil
		}
		delete(todo, st.Ino)
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			errs = append(errs, &os.PathError{Op: "open", Path: p, Err: err})
			return nil
		}
		n, err := u.revert(fd)
		unix.Close(fd)
		lost += n
		reverted++
		if err != nil {
			errs = append(errs, fmt.Errorf("revert %s: %w", p, err))
		}
		return nil
	})
	if walkErr != nil {
		errs = append(errs, walkErr)
	}
	return lost, reverted, errors.Join(errs...)
}
