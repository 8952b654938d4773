package data_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/powerfs"
)

// crashImage copies an open index and its session file to a new directory,
// as a process crash (or, with another boot id, a power loss) would leave
// them, and returns the copy's index path.
func crashImage(t *testing.T, index string) string {
	t.Helper()
	to := filepath.Join(t.TempDir(), "crashed")
	if out, err := exec.Command("cp", "-a", filepath.Dir(index), to).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	return filepath.Join(to, filepath.Base(index))
}

func openNoSync(t *testing.T, path string) *data.Store {
	t.Helper()
	s, err := data.OpenWith(path, data.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func hasCalendar(t *testing.T, s *data.Store, id string) bool {
	t.Helper()
	found := false
	if err := s.View(func(tx *data.Tx) error { found = tx.CalendarExists(id); return nil }); err != nil {
		t.Fatal(err)
	}
	return found
}

func session(t *testing.T, index string) string {
	t.Helper()
	b, err := os.ReadFile(index + ".session")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestNoSyncSessionLifecycle(t *testing.T) {
	data.SetBootID(t, "boot-1")
	index := filepath.Join(t.TempDir(), "index.db")
	s := openNoSync(t, index)
	if s.Synced() || s.Discarded() != "" {
		t.Fatalf("Synced %v, Discarded %q", s.Synced(), s.Discarded())
	}
	if got := session(t, index); got != "bookline-index-session 1 open boot-1" {
		t.Fatalf("session while open: %q", got)
	}
	putCalendar(t, s, "a")

	// A process crash: same boot, the page cache kept every write.
	crashed := crashImage(t, index)
	c := openNoSync(t, crashed)
	if c.Discarded() != "" || !hasCalendar(t, c, "a") {
		t.Fatalf("index of a process crash was not kept: discarded %q", c.Discarded())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := session(t, crashed); got != "bookline-index-session 1 clean" {
		t.Fatalf("session after Close: %q", got)
	}

	// A power loss: another boot, and the last session never closed.
	lost := crashImage(t, index)
	data.SetBootID(t, "boot-2")
	p := openNoSync(t, lost)
	if p.Discarded() == "" || hasCalendar(t, p, "a") {
		t.Fatalf("index written without fsync before a reboot was trusted")
	}
	if _, err := os.Stat(lost + ".discarded"); err != nil {
		t.Fatalf("untrusted index not kept aside: %v", err)
	}

	// A clean close survives any reboot.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data.SetBootID(t, "boot-3")
	r := openNoSync(t, index)
	if r.Discarded() != "" || !hasCalendar(t, r, "a") {
		t.Fatalf("cleanly closed index not trusted after a reboot: %q", r.Discarded())
	}
}

// TestSessionUnknownBootIsDistrusted: without a boot id (not Linux) an
// unclosed NoSync session may have been a power loss, so it is discarded.
func TestSessionUnknownBootIsDistrusted(t *testing.T) {
	data.SetBootID(t, "")
	index := filepath.Join(t.TempDir(), "index.db")
	s := openNoSync(t, index)
	putCalendar(t, s, "a")
	c := openNoSync(t, crashImage(t, index))
	if c.Discarded() == "" || hasCalendar(t, c, "a") {
		t.Fatal("unclosed NoSync session trusted without a boot id")
	}
}

// TestSyncedOpenTrustsAndCleansSession: a synced Open of an index left by a
// crashed NoSync session on the same boot fsyncs it and marks it clean.
func TestSyncedOpenTrustsAndCleansSession(t *testing.T) {
	data.SetBootID(t, "boot-1")
	index := filepath.Join(t.TempDir(), "index.db")
	s := openNoSync(t, index)
	putCalendar(t, s, "a")
	crashed := crashImage(t, index)
	c, err := data.Open(crashed)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Synced() || c.Discarded() != "" || !hasCalendar(t, c, "a") {
		t.Fatalf("synced open of a same-boot crash image: synced %v discarded %q", c.Synced(), c.Discarded())
	}
	if got := session(t, crashed); got != "bookline-index-session 1 clean" {
		t.Fatalf("session after a synced open: %q", got)
	}
}

// TestOpenSurvivesPowerLossInANewDirectory: an index opened in directories
// that did not exist, with one synced commit, is there after a power cut
// (the new directories' entries and the file's name were synced too). The
// store runs in a child process: a process that serves the FUSE mount must
// not fault on an mmap of it (its own garbage collector could stop the
// server mid-fault).
func TestOpenSurvivesPowerLossInANewDirectory(t *testing.T) {
	if path := os.Getenv("BOOKLINE_POWERFS_CHILD_INDEX"); path != "" {
		s, err := data.Open(path)
		if err == nil {
			err = s.Commit(func(tx *data.Tx) error { return tx.PutCalendar(data.Calendar{ID: "kept"}) })
		}
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("committed")
		_, _ = io.Copy(io.Discard, os.Stdin) // until killed
		return
	}
	if err := powerfs.Available(); err != nil {
		t.Skipf("power-loss file system unavailable here: %v", err)
	}
	backing, mnt := t.TempDir(), t.TempDir()
	fs, err := powerfs.Mount(backing, mnt, powerfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestOpenSurvivesPowerLossInANewDirectory$")
	child.Env = append(os.Environ(), "BOOKLINE_POWERFS_CHILD_INDEX="+filepath.Join(mnt, "new", "deeper", "index.db"))
	stdin, _ := child.StdinPipe()
	defer stdin.Close()
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "committed" {
		_ = child.Process.Kill()
		_ = child.Wait()
		t.Fatalf("child: %q %v", line, err)
	}
	fs.Cut()
	_ = child.Process.Kill()
	_ = child.Wait()
	if err := fs.Unmount(); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Revert(); err != nil {
		t.Fatal(err)
	}
	s, err := data.Open(filepath.Join(backing, "new", "deeper", "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.View(func(tx *data.Tx) error {
		if !tx.CalendarExists("kept") {
			return errors.New("the synced commit is gone")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
