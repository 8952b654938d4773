package data

import (
	"fmt"
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
