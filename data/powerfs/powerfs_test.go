package powerfs_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bookline/bookline/data/powerfs"
	"golang.org/x/sys/unix"
)

// rig is a backing directory and a mount point with a power-loss file
// system mounted over them.
type rig struct {
	t       *testing.T
	backing string
	mnt     string
	opts    powerfs.Options
	fs      *powerfs.FS
}

func newRig(t *testing.T) *rig { return newRigWith(t, powerfs.Options{}, nil) }

// newRigWith creates files in the backing directory before it mounts it;
// they count as durable.
func newRigWith(t *testing.T, opts powerfs.Options, files map[string]string) *rig {
	t.Helper()
	if err := powerfs.Available(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	r := &rig{t: t, backing: filepath.Join(dir, "backing"), mnt: filepath.Join(dir, "mnt"), opts: opts}
	for _, d := range []string{r.backing, r.mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	seed(t, r.backing, files)
	r.mount()
	// Runs before t.TempDir's removal: leave no mount behind, even when
	// the test failed half way.
	t.Cleanup(func() {
		if r.fs != nil {
			r.fs.Cut()
			if err := r.fs.Unmount(); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return r
}

func (r *rig) mount() {
	r.t.Helper()
	fs, err := powerfs.Mount(r.backing, r.mnt, r.opts)
	if err != nil {
		r.t.Fatal(err)
	}
	r.fs = fs
}

// crash cuts the power, unmounts, reverts and mounts again.
func (r *rig) crash() powerfs.RevertStats {
	r.t.Helper()
	r.fs.Cut()
	if err := r.fs.Unmount(); err != nil {
		r.t.Fatal(err)
	}
	rs, err := r.fs.Revert()
	if err != nil {
		r.t.Fatalf("revert: %v", err)
	}
	r.fs = nil
	r.mount()
	return rs
}

func (r *rig) path(name string) string { return filepath.Join(r.mnt, name) }

// write writes data to name at off, creating it if needed, and fsyncs it
// if sync.
func (r *rig) write(name string, off int64, data string, sync bool) {
	r.t.Helper()
	f, err := os.OpenFile(r.path(name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(data), off); err != nil {
		r.t.Fatal(err)
	}
	if sync {
		r.fsync(f)
	}
}

func (r *rig) fsync(f *os.File) {
	r.t.Helper()
	if err := f.Sync(); err != nil {
		r.t.Fatalf("fsync %s: %v", f.Name(), err)
	}
}

// syncDir fsyncs directory name ("" is the root) of the mount.
func (r *rig) syncDir(name string) {
	r.t.Helper()
	d, err := os.Open(r.path(name))
	if err != nil {
		r.t.Fatal(err)
	}
	defer d.Close()
	r.fsync(d)
}

// want checks that name holds exactly content through the mount.
func (r *rig) want(name, content string) {
	r.t.Helper()
	got, err := os.ReadFile(r.path(name))
	if err != nil {
		r.t.Fatalf("%s: %v", name, err)
	}
	if string(got) != content {
		r.t.Fatalf("%s holds %d bytes %.40q, want %d bytes %.40q", name, len(got), got, len(content), content)
	}
}

func (r *rig) wantGone(name string) {
	r.t.Helper()
	if _, err := os.Lstat(r.path(name)); !errors.Is(err, os.ErrNotExist) {
		r.t.Fatalf("%s: got %v, want it gone", name, err)
	}
}

// seed creates files in the backing directory before the mount, where
// they are durable.
func seed(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func pattern(n int, seed byte) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7%251)
	}
	return string(b)
}

func TestFileDataRevertsToLastSync(t *testing.T) {
	r := newRig(t)

	// Overwrites and an append after the sync are lost.
	synced := pattern(10000, 1)
	r.write("a", 0, synced, true)
	r.write("a", 5000, "overwritten in the middle", false)
	r.write("a", 9990, pattern(20000, 2), false)
	r.syncDir("")

	// A file extended far beyond its synced size comes back to it.
	r.write("b", 0, "short", true)
	r.write("b", 1<<20, "far away", false)

	// A truncate is undone, and what was written after it too.
	long := pattern(3*4096+123, 3)
	r.write("c", 0, long, true)
	if err := os.Truncate(r.path("c"), 100); err != nil {
		t.Fatal(err)
	}
	r.write("c", 50, "after truncate", false)
	r.syncDir("")

	// A file synced twice keeps the second sync.
	r.write("d", 0, "first", true)
	r.write("d", 0, "second", true)
	r.write("d", 0, "THIRD!!!", false)
	r.syncDir("")

	if s := r.fs.Stats(); s.UnsyncedBytes == 0 || s.Fsyncs < 5 {
		t.Fatalf("stats before the cut: %+v", s)
	}
	rs := r.crash()
	r.want("a", synced)
	r.want("b", "short")
	r.want("c", long)
	r.want("d", "second")
	if rs.FilesReverted != 4 || rs.BytesLost == 0 || rs.NamespaceOpsUndone != 0 {
		t.Fatalf("revert stats %+v", rs)
	}
}

func TestExistingFileRevertsToMountState(t *testing.T) {
	r := newRigWith(t, powerfs.Options{}, map[string]string{"old": "from before the mount", "sub/x": "x"})

	r.write("old", 5, "CHANGED", false)
	f, err := os.OpenFile(r.path("sub/x"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	r.want("sub/x", "")
	r.crash()
	r.want("old", "from before the mount")
	r.want("sub/x", "x")
}

func TestNewFileNeedsDirSync(t *testing.T) {
	r := newRig(t)
	r.write("kept", 0, "synced file, synced directory", true)
	// A new file in a synced directory whose data was never synced
	// survives, empty.
	r.write("empty", 0, "never synced", false)
	r.syncDir("")
	r.write("lost", 0, "synced file, unsynced directory", true)

	rs := r.crash()
	r.wantGone("lost")
	r.want("kept", "synced file, synced directory")
	r.want("empty", "")
	if rs.NamespaceOpsUndone != 1 {
		t.Fatalf("revert stats %+v", rs)
	}
}

func TestRenameOverTarget(t *testing.T) {
	for _, syncDir := range []bool{false, true} {
		t.Run(map[bool]string{false: "no dir sync", true: "dir sync"}[syncDir], func(t *testing.T) {
			r := newRig(t)
			r.write("state", 0, "old state", true)
			r.syncDir("")
			r.write("state.tmp", 0, "new state", true)
			if err := os.Rename(r.path("state.tmp"), r.path("state")); err != nil {
				t.Fatal(err)
			}
			r.want("state", "new state")
			if syncDir {
				r.syncDir("")
			}
			r.crash()
			r.wantGone("state.tmp")
			if syncDir {
				r.want("state", "new state")
			} else {
				r.want("state", "old state")
			}
		})
	}
}

func TestUnlinkUndone(t *testing.T) {
	r := newRig(t)
	r.write("f", 0, "durable content", true)
	r.syncDir("")
	r.write("f", 0, "UNSYNCED", false)
	if err := os.Remove(r.path("f")); err != nil {
		t.Fatal(err)
	}
	r.wantGone("f")
	// The same name, reused by a new file, is undone first.
	r.write("f", 0, "a new file", true)
	r.crash()
	r.want("f", "durable content")
}

func TestDurableUnlinkDeletesForReal(t *testing.T) {
	r := newRig(t)
	r.write("f", 0, pattern(8192, 4), true)
	r.syncDir("")
	if err := os.Remove(r.path("f")); err != nil {
		t.Fatal(err)
	}
	attic := filepath.Join(r.backing, ".powerfs-attic")
	if ents, _ := os.ReadDir(attic); len(ents) != 1 {
		t.Fatalf("attic holds %d entries, want the unlinked file", len(ents))
	}
	r.syncDir("")
	if ents, _ := os.ReadDir(attic); len(ents) != 0 {
		t.Fatalf("attic holds %d entries after the directory sync, want none", len(ents))
	}
	if s := r.fs.Stats(); s.PendingNamespaceOps != 0 {
		t.Fatalf("stats %+v", s)
	}
	r.crash()
	r.wantGone("f")
}

func TestMkdirTreeGone(t *testing.T) {
	r := newRig(t)
	// Synced all the way up: kept.
	if err := os.Mkdir(r.path("y"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.write("y/f", 0, "in y", true)
	r.syncDir("y")
	r.syncDir("")

	if err := os.MkdirAll(r.path("d/e"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.write("d/f", 0, "in d", false)
	r.write("d/e/g", 0, "in e", false)

	// Synced all the way down but the root: still unreachable.
	if err := os.Mkdir(r.path("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.write("x/f", 0, "in x", true)
	r.syncDir("x")

	r.crash()
	r.wantGone("d")
	r.wantGone("x")
	r.want("y/f", "in y")
	if ents, err := os.ReadDir(r.mnt); err != nil || len(ents) != 1 {
		t.Fatalf("root holds %v (%v), want only y", ents, err)
	}
}

func TestRmdirUndone(t *testing.T) {
	r := newRig(t)
	if err := os.Mkdir(r.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.write("d/f", 0, "f", true)
	r.syncDir("d")
	r.syncDir("")
	// Emptying and removing d is durable for d (its entry f is gone)
	// but the removal of d itself is not.
	if err := os.Remove(r.path("d/f")); err != nil {
		t.Fatal(err)
	}
	r.syncDir("d")
	if err := os.Remove(r.path("d")); err != nil {
		t.Fatal(err)
	}
	r.crash()
	if fi, err := os.Stat(r.path("d")); err != nil || !fi.IsDir() {
		t.Fatalf("d: %v, %v", fi, err)
	}
	r.wantGone("d/f")
}

func TestCrossDirectoryRename(t *testing.T) {
	r := newRig(t)
	for _, d := range []string{"a", "b", "c"} {
		if err := os.Mkdir(r.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r.write("a/x", 0, "x", true)
	r.write("c/y", 0, "y", true)
	r.syncDir("a")
	r.syncDir("c")
	r.syncDir("")

	// The source directory is never synced: not durable.
	if err := os.Rename(r.path("a/x"), r.path("b/x")); err != nil {
		t.Fatal(err)
	}
	// Both directories synced: durable.
	if err := os.Rename(r.path("c/y"), r.path("b/y")); err != nil {
		t.Fatal(err)
	}
	r.syncDir("c")
	r.syncDir("b")
	// Unlinking b/x is synced, but it removes what the pending rename
	// moved there: undoing the rename needs it undone too.
	if err := os.Remove(r.path("b/x")); err != nil {
		t.Fatal(err)
	}
	r.syncDir("b")

	rs := r.crash()
	r.want("a/x", "x")
	r.wantGone("b/x")
	r.want("b/y", "y")
	r.wantGone("c/y")
	if rs.NamespaceOpsUndone != 2 {
		t.Fatalf("revert stats %+v", rs)
	}
}

func TestRenameDirectoryAndExchange(t *testing.T) {
	r := newRig(t)
	if err := os.MkdirAll(r.path("d/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.write("d/sub/f", 0, "f", true)
	r.write("p", 0, "p", true)
	r.write("q", 0, "q", true)
	r.syncDir("d/sub")
	r.syncDir("d")
	r.syncDir("")

	if err := os.Rename(r.path("d"), r.path("e")); err != nil {
		t.Fatal(err)
	}
	// A durable change inside the moved directory stays where the
	// directory goes back to.
	r.write("e/sub/g", 0, "g", true)
	r.syncDir("e/sub")
	if err := unix.Renameat2(unix.AT_FDCWD, r.path("p"), unix.AT_FDCWD, r.path("q"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	r.want("p", "q")
	r.crash()
	r.wantGone("e")
	r.want("d/sub/f", "f")
	r.want("d/sub/g", "g")
	r.want("p", "p")
	r.want("q", "q")
}

func TestHardLinkAndSymlink(t *testing.T) {
	r := newRig(t)
	r.write("f", 0, "linked", true)
	r.syncDir("")
	if err := os.Link(r.path("f"), r.path("g")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("g", r.path("t")); err != nil {
		t.Fatal(err)
	}
	r.syncDir("")
	if err := os.Symlink("f", r.path("s")); err != nil {
		t.Fatal(err)
	}
	r.want("s", "linked")
	if err := os.Remove(r.path("f")); err != nil {
		t.Fatal(err)
	}
	r.want("g", "linked")
	r.crash()
	r.want("f", "linked")
	r.want("g", "linked")
	r.wantGone("s")
	if got, err := os.Readlink(r.path("t")); err != nil || got != "g" {
		t.Fatalf("readlink t: %q, %v", got, err)
	}
}

func TestJournaled(t *testing.T) {
	r := newRigWith(t, powerfs.Options{Journaled: true}, nil)
	r.write("state", 0, "old", true)
	r.write("state.tmp", 0, "new", true)
	if err := os.Rename(r.path("state.tmp"), r.path("state")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(r.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.write("d/f", 0, "never synced", false)
	// Any file's fsync commits every namespace operation before it.
	r.write("other", 0, "x", true)
	// So does a directory's, wherever the operation was.
	if err := os.Mkdir(r.path("e"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.syncDir("d")
	// Nothing after the last sync is durable.
	r.write("late", 0, "late", false)
	if err := os.Remove(r.path("other")); err != nil {
		t.Fatal(err)
	}

	rs := r.crash()
	r.want("state", "new")
	r.wantGone("state.tmp")
	r.want("d/f", "")
	r.want("other", "x")
	r.wantGone("late")
	if fi, err := os.Stat(r.path("e")); err != nil || !fi.IsDir() {
		t.Fatalf("e: %v %v", fi, err)
	}
	if rs.NamespaceOpsUndone != 2 {
		t.Fatalf("revert stats %+v", rs)
	}
}

func TestUnlinkedOpenFile(t *testing.T) {
	r := newRig(t)
	r.write("f", 0, "still open", true)
	r.syncDir("")
	f, err := os.OpenFile(r.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(r.path("f")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("STILL"), 0); err != nil {
		t.Fatal(err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 10 {
		t.Fatalf("fstat of the unlinked file: %v, %v", fi, err)
	}
	// Reopening through /proc opens the unlinked file's node, which
	// only the attic has.
	g, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got, err := io.ReadAll(g); err != nil || string(got) != "STILL open" {
		t.Fatalf("reopened: %q, %v", got, err)
	}
	f.Close()
	g.Close()
	r.crash()
	r.want("f", "still open")
}

// TestUnmountBusy unmounts while a process still has its working
// directory on the mount and this one a file open there, as when a killed
// process was not reaped yet.
func TestUnmountBusy(t *testing.T) {
	r := newRig(t)
	if err := os.Mkdir(r.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.syncDir("")
	r.write("d/f", 0, "data", true)
	c := startChild(t, "idle", r.path("d"))
	c.expect("ready")
	f, err := os.Open(r.path("d/f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	r.fs.Cut()
	if err := r.fs.Unmount(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.fs.Revert(); err != nil {
		t.Fatal(err)
	}
	r.fs = nil
	c.kill()
	f.Close()
	r.mount()
	r.wantGone("d/f")
	if fi, err := os.Stat(r.path("d")); err != nil || !fi.IsDir() {
		t.Fatalf("d: %v %v", fi, err)
	}
}

// TestFuseConnectionNotInherited checks that subprocesses do not get the
// FUSE connection's descriptor, which would keep the connection alive
// (and them hanging on it) if the test process died.
func TestFuseConnectionNotInherited(t *testing.T) {
	newRig(t)
	startChild(t, "no-fuse-fd", "").wait()
}

func TestCutFailsEverythingWithEIO(t *testing.T) {
	r := newRig(t)
	r.write("f", 0, "synced", true)
	r.syncDir("")
	f, err := os.OpenFile(r.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := os.Open(r.mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	before := r.fs.Stats()

	r.fs.Cut()
	eio := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%s after the cut: %v, want EIO", what, err)
		}
	}
	_, err = f.WriteAt([]byte("after the cut"), 0)
	eio("write", err)
	eio("fsync", f.Sync())
	eio("fsyncdir", d.Sync())
	eio("ftruncate", f.Truncate(0))
	_, err = os.Create(r.path("new"))
	eio("create", err)
	eio("mkdir", os.Mkdir(r.path("dir"), 0o755))
	eio("rename", os.Rename(r.path("f"), r.path("g")))
	eio("unlink", os.Remove(r.path("f")))
	_, err = os.Stat(r.path("other"))
	eio("lookup", err)
	var st unix.Statfs_t
	eio("statfs", unix.Statfs(r.mnt, &st))

	after := r.fs.Stats()
	if after.Fsyncs != before.Fsyncs || after.DirFsyncs != before.DirFsyncs || after.NamespaceOps != before.NamespaceOps || !after.Cut {
		t.Fatalf("stats changed by the cut: before %+v, after %+v", before, after)
	}
	f.Close()
	d.Close()
	r.crash()
	r.want("f", "synced")
	r.wantGone("new")
}

func TestPassThroughBasics(t *testing.T) {
	r := newRig(t)
	// O_APPEND appends at the end the kernel knows, not at offset 0.
	for _, s := range []string{"one ", "two ", "three"} {
		f, err := os.OpenFile(r.path("log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	r.want("log", "one two three")

	f, err := os.OpenFile(r.path("alloc"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 1<<16); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 1<<16 {
		t.Fatalf("size after fallocate: %v, %v", fi, err)
	}
	f.Close()

	var st unix.Statfs_t
	if err := unix.Statfs(r.mnt, &st); err != nil || st.Blocks == 0 {
		t.Fatalf("statfs: %+v, %v", st, err)
	}
	ents, err := os.ReadDir(r.mnt)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "alloc log" {
		t.Fatalf("readdir: %v", names)
	}
	if _, err := os.Stat(r.path(".powerfs-attic")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("attic visible: %v", err)
	}
	if err := os.Mkdir(r.path(".powerfs-attic"), 0o755); err == nil {
		t.Fatal("mkdir of the attic's name succeeded")
	}

	// mmap sees what write(2) wrote, before and after growing.
	startChild(t, "mmap", r.path("m")).wait()
}
