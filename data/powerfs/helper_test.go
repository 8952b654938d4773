package powerfs_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// Code that touches an mmap of a file on the mount must run in another
// process than the file system's server. A page fault on the mapping waits
// in the kernel for the server's READ reply, and a Go thread stuck in a
// page fault never reaches a safe point: the next stop-the-world GC then
// stops the server's goroutines and waits for that thread forever. bookline
// runs as a subprocess in the power-loss test for the same reason. The
// helpers below are this test binary run again with helperEnv set.
const (
	helperEnv    = "POWERFS_TEST_HELPER"
	helperArgEnv = "POWERFS_TEST_HELPER_ARG"
)

var helpers = map[string]func(arg string) error{
	"mmap":         helperMmap,
	"bbolt-write":  helperBboltWrite,
	"bbolt-check":  helperBboltCheck,
	"nats-publish": helperNATSPublish,
	"no-fuse-fd": func(string) error {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return err
		}
		for _, e := range ents {
			if target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); target == "/dev/fuse" {
				return fmt.Errorf("inherited /dev/fuse as fd %s", e.Name())
			}
		}
		return nil
	},
	// idle makes dir its working directory and waits. It changes
	// directory itself: a working directory set by exec.Cmd would be
	// entered between fork and exec, which the forking thread waits for
	// without reaching a GC safe point.
	"idle": func(dir string) error {
		if err := os.Chdir(dir); err != nil {
			return err
		}
		fmt.Println("ready")
		waitStdin()
		return nil
	},
}

func TestMain(m *testing.M) {
	if name := os.Getenv(helperEnv); name != "" {
		h := helpers[name]
		if h == nil {
			fmt.Fprintf(os.Stderr, "no helper %q\n", name)
			os.Exit(2)
		}
		if err := h(os.Getenv(helperArgEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is a helper process working on the mount, as the program under
// test does in a power-loss test. It reports progress as lines on stdout
// and waits for a line on stdin where the test needs to step in.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
	done   bool
}

func startChild(t *testing.T, name, arg string) *child {
	t.Helper()
	c := &child{t: t, lines: make(chan string, 16)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), helperEnv+"="+name, helperArgEnv+"="+arg)
	c.cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			c.lines <- s.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(c.kill)
	return c
}

// expect waits for the child to print want.
func (c *child) expect(want string) {
	c.t.Helper()
	select {
	case got, ok := <-c.lines:
		if !ok {
			c.kill()
			c.t.Fatalf("helper exited before %q: %s", want, c.stderr.String())
		}
		if got != want {
			c.t.Fatalf("helper said %q, want %q", got, want)
		}
	case <-time.After(60 * time.Second):
		c.t.Fatalf("helper did not say %q within a minute", want)
	}
}

// proceed lets the child go on past a wait for stdin.
func (c *child) proceed() {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, "\n"); err != nil {
		c.t.Fatal(err)
	}
}

// kill kills the child with SIGKILL and reaps it.
func (c *child) kill() {
	if c.done {
		return
	}
	c.done = true
	c.cmd.Process.Kill()
	c.cmd.Wait()
}

// wait waits for the child to exit and fails unless it succeeded.
func (c *child) wait() {
	c.t.Helper()
	c.stdin.Close()
	for range c.lines {
	}
	err := c.cmd.Wait()
	c.done = true
	if err != nil {
		c.t.Fatalf("helper: %v: %s", err, c.stderr.String())
	}
}

// waitStdin blocks a helper until the test writes a line (or closes stdin).
func waitStdin() {
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// helperMmap checks that a MAP_SHARED mapping of file path sees what
// write(2) writes, also past the file's end as it was when mapped.
func helperMmap(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	first := []byte(pattern(4096, 5))
	if _, err := f.WriteAt(first, 0); err != nil {
		return err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, 3*4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(m)
	if !bytes.Equal(m[:4096], first) {
		return errors.New("mmap does not see the first write")
	}
	if _, err := f.WriteAt([]byte("through write"), 100); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte("grown"), 8192); err != nil {
		return err
	}
	if got := string(m[100:113]); got != "through write" {
		return fmt.Errorf("mmap sees %q", got)
	}
	if got := string(m[8192:8197]); got != "grown" {
		return fmt.Errorf("mmap sees %q past the old end", got)
	}
	if !bytes.Equal(m[:100], first[:100]) {
		return errors.New("mmap lost bytes around the write")
	}
	return nil
}

func boltValue(prefix string, i int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "%s-%04d;", prefix, i), 40)
}

func boltPut(db *bolt.DB, prefix string, n int) error {
	for i := range n {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return b.Put(fmt.Appendf(nil, "%s%04d", prefix, i), boltValue(prefix, i))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

const (
	boltSynced   = 200
	boltUnsynced = 300
)

// helperBboltWrite commits to a bbolt database at path, first synced, then
// with NoSync, and waits to be killed.
func helperBboltWrite(path string) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	if err := boltPut(db, "synced", boltSynced); err != nil {
		return err
	}
	// The new database file's directory entry must be durable too.
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		return err
	}
	d.Close()
	fmt.Println("synced")
	waitStdin()

	// No fsync from here on: NoGrowSync also keeps bbolt from syncing
	// when the file grows.
	db.NoSync = true
	db.NoGrowSync = true
	if err := boltPut(db, "unsynced", boltUnsynced); err != nil {
		return err
	}
	err = db.View(func(tx *bolt.Tx) error {
		if n := tx.Bucket([]byte("b")).Stats().KeyN; n != boltSynced+boltUnsynced {
			return fmt.Errorf("%d keys before the cut", n)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Println("unsynced")
	waitStdin()
	return errors.New("not killed")
}

// helperBboltCheck opens the database at path after the cut: it must hold
// exactly the synced commits, pass bbolt's consistency check and take new
// commits.
func helperBboltCheck(path string) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		var errs []string
		for err := range tx.Check() {
			errs = append(errs, err.Error())
		}
		if len(errs) > 0 {
			return fmt.Errorf("check: %s", strings.Join(errs, "; "))
		}
		b := tx.Bucket([]byte("b"))
		if b == nil {
			return errors.New("bucket gone")
		}
		for i := range boltSynced {
			if got := b.Get(fmt.Appendf(nil, "synced%04d", i)); !bytes.Equal(got, boltValue("synced", i)) {
				return fmt.Errorf("synced%04d = %.30q", i, got)
			}
		}
		if n := b.Stats().KeyN; n != boltSynced {
			return fmt.Errorf("%d keys after the cut, want the %d synced ones", n, boltSynced)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("b")).Put([]byte("after"), []byte("restart"))
	})
}

const natsAcked = 100

func natsPayload(i int) []byte {
	return bytes.Repeat([]byte{byte('a' + i%26)}, 50+i*7%900)
}

// helperNATSPublish runs an embedded nats-server with SyncAlways on
// storeDir, publishes natsAcked messages to a new file-storage stream,
// each acknowledged, and waits to be killed.
func helperNATSPublish(storeDir string) error {
	ns, err := server.NewServer(&server.Options{
		JetStream:  true,
		StoreDir:   storeDir,
		SyncAlways: true,
		DontListen: true,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		return err
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		return errors.New("nats-server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CMDS", Subjects: []string{"cmds.>"}, Storage: jetstream.FileStorage}); err != nil {
		return err
	}
	for i := range natsAcked {
		if _, err := js.Publish(ctx, "cmds.x", natsPayload(i)); err != nil {
			return err
		}
	}
	fmt.Println("published")
	waitStdin()
	return errors.New("not killed")
}
