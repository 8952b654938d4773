package data

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFileExclusive creates path with b, durably, only if it does not
// exist yet (fs.ErrExist otherwise). The file appears whole or not at all:
// it is written and fsynced under a temporary name, then linked to path,
// which fails if path exists. Two processes making the same file at the
// same moment thus agree on one content: the loser reads the winner's.
func WriteFileExclusive(path string, b []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }()
	if err = f.Chmod(perm); err == nil {
		if _, err = f.Write(b); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("data: write %s: %w", path, err)
	}
	if err = os.Link(tmp, path); err != nil {
		return err // fs.ErrExist when path exists
	}
	return SyncDir(filepath.Dir(path))
}

// ErrNotPrivate: a file that must be its owner's alone may be read by
// group or others.
var ErrNotPrivate = errors.New("data: file readable by others than its owner")

// ReadPrivateFile reads at most limit bytes of a file that only its owner
// may read (a key, a credential), refusing one whose mode lets group or
// others read it.
func ReadPrivateFile(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %v (chmod 600)", ErrNotPrivate, path, st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("data: read %s: %w", path, err)
	}
	return b, nil
}
