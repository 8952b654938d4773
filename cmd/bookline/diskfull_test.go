package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bookline/bookline/queue"
)

// TestFullDiskRecoversWithoutRestart runs `bookline serve` (embedded NATS)
// with its data directory on a 64 MiB tmpfs, under a booking load:
//
//  1. The disk is filled. /readyz turns 503 with "storage full", the
//     storage metrics count it, and bookings sent while it says so are
//     answered 503 (202 is allowed: stored, decided later), never 201.
//  2. The filler is removed: within 5 s a booking gets 201 again, without a
//     restart.
//  3. The streams are made to hold most of the disk, bookline is killed
//     and started again with little space left: the store limit
//     nats-server sizes from the space then free is below what the streams
//     hold. It starts not ready, saying so and what to do (free space or
//     --nats-max-store); once space is freed it books again within 5 s.
//  4. kill -9 and a start with room.
//
// After phases 2, 3 and 4: every booking ever answered 201 is there, each
// 202 resolved to what the list shows, nothing overlaps, and the index
// equals a replay of the stream (bookline verify).
//
// A tmpfs rather than data/powerfs: nats-server sizes its store from
// statfs(2) of the file system, which a tmpfs answers truthfully and a
// FUSE quota would have to fake, and ENOSPC comes from the kernel as on a
// real disk (tmpfs allocates pages on write, as a file system with delayed
// allocation reserves them). Its fsync always succeeds: a failed fsync
// stays fatal and is tested in queue (logsync).
func TestFullDiskRecoversWithoutRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test on a tmpfs")
	}
	mnt := mountTmpfs(t, 64<<20)
	dir := filepath.Join(mnt, "data")
	args := []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--partitions", "2", "--reply-timeout", "2s"}
	p := startProc(t, args...)
	w := newDiskWorld(t)
	w.createCalendars(p.URL)
	for range 20 {
		if st := w.book(p.URL); st != 201 {
			t.Fatalf("booking before the disk filled: %d", st)
		}
	}

	// 1. Full, under load.
	load := w.startLoad(p.URL, 4)
	for deadline := time.Now().Add(30 * time.Second); w.counts()[201] < 200; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("bookings before the disk filled: %v", w.counts())
		}
	}
	filler := filepath.Join(mnt, "filler")
	fillDisk(t, filler, 0)
	reason := waitReadyz(t, p.URL, 30*time.Second, func(code int, body string) bool {
		return code == 503 && strings.Contains(body, "storage full")
	})
	t.Logf("readyz while full: %s", reason)
	if fails := metricSum(t, p.URL, "bookline_storage_write_failures_total"); fails < 1 {
		t.Errorf("bookline_storage_write_failures_total is %v while the disk is full", fails)
	}
	// A commit that fits in the index file's free pages clears the state
	// until the next one fails, so the gauge may read 0 for a moment
	// while the disk stays full: it must read 1 again soon.
	failing := 0.0
	for deadline := time.Now().Add(10 * time.Second); failing < 1 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		failing = metricSum(t, p.URL, "bookline_storage_failing")
	}
	if failing < 1 {
		t.Errorf("bookline_storage_failing stayed %v for 10 s while the disk is full", failing)
	}
	w.expectNo201WhileFull(p.URL, 30)

	// 2. Room again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	took := w.until201(p.URL, 5*time.Second)
	t.Logf("phase 2: a booking got 201 %s after the filler was removed", took.Round(time.Millisecond))
	load.stop()
	waitReadyz(t, p.URL, 10*time.Second, func(code int, _ string) bool { return code == 200 })
	w.checkAll(p.URL)
	w.verify(p.output(), p.URL)

	// 3. The streams hold most of the disk; restart with little room.
	w.stuffStreams(natsURLOf(t, p.output()), 24)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.wait(t)
	held := dirBytes(t, filepath.Join(dir, "nats"))
	fillDisk(t, filler, 0)
	if out, err := runProc(args...); err == nil || !strings.Contains(out, "storage full: free space on the file system of "+dir) {
		t.Errorf("a start on a full disk: %v, and its last words do not say what to do:\n%s", err, out)
	} else {
		t.Logf("a start on a full disk ends: %s", out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	fillDisk(t, filler, held/6)
	p = launchProc(t, args...)
	reason = waitReadyz(t, p.URL, 30*time.Second, func(code int, body string) bool {
		return code == 503 && strings.Contains(body, "storage full") && strings.Contains(body, "--nats-max-store")
	})
	t.Logf("readyz after a start on a nearly full disk (streams %d MiB): %s", held>>20, reason)
	if !strings.Contains(p.output(), "STORAGE FULL") || !strings.Contains(p.output(), "--nats-max-store") {
		t.Errorf("the log does not say what to do about the store limit:\n%s", p.output())
	}
	w.expectNo201WhileFull(p.URL, 10)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	took = w.until201(p.URL, 5*time.Second)
	t.Logf("phase 3: a booking got 201 %s after the filler was removed", took.Round(time.Millisecond))
	waitReadyz(t, p.URL, 10*time.Second, func(code int, _ string) bool { return code == 200 })
	w.checkAll(p.URL)
	w.verify(p.output(), p.URL)

	// 4. kill -9, start with room.
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.wait(t)
	p = startProc(t, args...)
	w.checkAll(p.URL)
	w.verify(p.output(), p.URL)
	t.Logf("answers: %v; %d confirmed bookings, %d answered 202", w.counts(), len(w.confirmed), len(w.pending))
}

// TestFullIndexDiskRecovers: only the index's file system fills; the NATS
// store, on a file system of its own, goes on storing commands. Commands
// stored meanwhile cannot be decided (202), new ones are refused at once
// (503) while /readyz names the index (but for a commit that fits in the
// index file's free pages now and then); once there is room the writers,
// retrying, decide them all and bookings get 201 again within 5 s.
func TestFullIndexDiskRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test on a tmpfs")
	}
	mnt := mountTmpfs(t, 32<<20)
	dir := filepath.Join(mnt, "data")
	if err := os.MkdirAll(filepath.Join(dir, "nats"), 0o755); err != nil {
		t.Fatal(err)
	}
	mountTmpfsAt(t, filepath.Join(dir, "nats"), 256<<20)
	args := []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--partitions", "2", "--reply-timeout", "2s"}
	p := startProc(t, args...)
	w := newDiskWorld(t)
	w.createCalendars(p.URL)
	load := w.startLoad(p.URL, 4)
	for deadline := time.Now().Add(30 * time.Second); w.counts()[201] < 200; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("bookings before the disk filled: %v", w.counts())
		}
	}
	filler := filepath.Join(mnt, "filler")
	fillDisk(t, filler, 0)
	reason := waitReadyz(t, p.URL, 30*time.Second, func(code int, body string) bool {
		return code == 503 && strings.Contains(body, "storage full: the index cannot be written")
	})
	t.Logf("readyz while the index's disk is full: %s", reason)
	if fails := metricSum(t, p.URL, `bookline_storage_write_failures_total\{component="index"\}`); fails < 1 {
		t.Errorf("index storage write failures counted: %v", fails)
	}
	// The index's file can still take a small commit into its free pages
	// while its file system is full: a writer's retry may then succeed for
	// a moment, and a booking decided in that moment is confirmed (its
	// command is on the stream's disk; the index holds it). So here most,
	// not all, bookings sent while /readyz says full are refused.
	w.expectRefusedWhileFull(p.URL, 20)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	took := w.until201(p.URL, 5*time.Second)
	t.Logf("a booking got 201 %s after the filler was removed", took.Round(time.Millisecond))
	load.stop()
	waitReadyz(t, p.URL, 10*time.Second, func(code int, _ string) bool { return code == 200 })
	w.checkAll(p.URL)
	w.verify(p.output(), p.URL)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.wait(t)
	p = startProc(t, args...)
	w.checkAll(p.URL)
	w.verify(p.output(), p.URL)
	t.Logf("answers: %v; %d confirmed bookings, %d answered 202", w.counts(), len(w.confirmed), len(w.pending))
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, or skips the
// test where it cannot (not root).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	mountTmpfsAt(t, dir, size)
	return dir
}

func mountTmpfsAt(t *testing.T, dir string, size int64) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs for the full-disk test (it needs root, as in CI): %v", err)
	}
	// Registered after the processes' cleanups are, so it runs after them.
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// fillDisk writes path until its file system has at most leave bytes free.
func fillDisk(t *testing.T, path string, leave int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
		t.Fatal(err)
	}
	want := int64(st.Bavail)*int64(st.Bsize) - leave
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<16)
	for written := int64(0); written < want; {
		n, err := f.Write(buf[:min(int64(len(buf)), want-written)])
		written += int64(n)
		if err != nil {
			if leave == 0 && strings.Contains(err.Error(), "no space left") {
				return
			}
			t.Fatalf("fill %s: %v", path, err)
		}
	}
	if leave == 0 {
		// Whatever bookline freed meanwhile.
		for {
			if _, err := f.Write(buf[:4096]); err != nil {
				return
			}
		}
	}
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			total += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// runProc runs bookline with args to its end and returns what it wrote to
// stderr.
func runProc(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), "BOOKLINE_TEST_MAIN=1", "BOOKLINE_TEST_ARGS="+strings.Join(args, "\x1f"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	return stderr.String(), err
}

func natsURLOf(t *testing.T, logs string) string {
	t.Helper()
	m := natsURLRe.FindAllStringSubmatch(logs, -1)
	if m == nil {
		t.Fatalf("no NATS address in the logs:\n%s", logs)
	}
	return m[len(m)-1][1]
}

// waitReadyz polls /readyz until ok accepts its answer and returns the body.
func waitReadyz(t *testing.T, base string, within time.Duration, ok func(code int, body string) bool) string {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for {
		code, body := readyz(base)
		if ok(code, body) {
			return body
		}
		last = fmt.Sprintf("%d %s", code, body)
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not turn as expected within %s; last answer: %s", within, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readyz(base string) (int, string) {
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricSum adds up every sample of a metric on /metrics.
func metricSum(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	re := regexp.MustCompile(`(?m)^` + name + `(\{[^}]*\})? (\S+)$`) // name: a regexp
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		var v float64
		if _, err := fmt.Sscan(m[2], &v); err == nil {
			sum += v
		}
	}
	return sum
}

var diskCals = []string{"full-a", "full-b", "full-c"}

// diskWorld is what the clients were told.
type diskWorld struct {
	t         *testing.T
	next      atomic.Int64 // slots: every booking its own, so none is refused as taken
	mu        sync.Mutex
	confirmed map[string]booking // answered 201
	calOf     map[string]string
	pending   []string // Locations of the answers 202
	statuses  map[int]int
	client    *http.Client
}

func newDiskWorld(t *testing.T) *diskWorld {
	return &diskWorld{t: t, confirmed: map[string]booking{}, calOf: map[string]string{}, statuses: map[int]int{},
		client: &http.Client{Timeout: 20 * time.Second}}
}

func (w *diskWorld) createCalendars(base string) {
	for _, c := range diskCals {
		req, _ := http.NewRequest("PUT", base+"/v1/calendars/"+c, strings.NewReader(`{"timezone":"UTC"}`))
		resp, err := w.client.Do(req)
		if err != nil || resp.StatusCode != 201 {
			w.t.Fatalf("create calendar %s: %v %v", c, err, resp)
		}
		resp.Body.Close()
	}
}

// book asks for the next slot and records the answer; 0 means no answer.
func (w *diskWorld) book(base string) int {
	k := w.next.Add(1)
	cal := diskCals[k%int64(len(diskCals))]
	start := time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(k) * 15 * time.Minute)
	body := fmt.Sprintf(`{"start":%q,"end":%q,"customer":"full disk %d"}`, start.Format(time.RFC3339),
		start.Add(15*time.Minute).Format(time.RFC3339), k)
	resp, err := w.client.Post(base+"/v1/calendars/"+cal+"/bookings", "application/json", strings.NewReader(body))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.statuses[resp.StatusCode]++
	switch resp.StatusCode {
	case 201:
		var bk booking
		if err := json.Unmarshal(b, &bk); err != nil || bk.ID == "" {
			w.t.Errorf("201 without a booking: %s", b)
			break
		}
		w.confirmed[bk.ID], w.calOf[bk.ID] = bk, cal
	case 202:
		w.pending = append(w.pending, resp.Header.Get("Location"))
	case 503:
	default:
		w.t.Errorf("booking %d: unexpected answer %d %s", k, resp.StatusCode, b)
	}
	return resp.StatusCode
}

type diskLoad struct {
	stopped atomic.Bool
	wg      sync.WaitGroup
}

func (l *diskLoad) stop() {
	l.stopped.Store(true)
	l.wg.Wait()
}

func (w *diskWorld) startLoad(base string, clients int) *diskLoad {
	l := &diskLoad{}
	for range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for !l.stopped.Load() {
				if st := w.book(base); st == 503 || st == 0 {
					time.Sleep(10 * time.Millisecond) // answered at once: do not spin
				}
			}
		}()
	}
	w.t.Cleanup(l.stop) // also when the test ends early
	return l
}

// expectNo201WhileFull books until n bookings were sent between two
// answers of /readyz that say the storage is full (bookWhileFull), and
// fails on a 201 among those.
func (w *diskWorld) expectNo201WhileFull(base string, n int) {
	w.t.Helper()
	if accepted, _ := w.bookWhileFull(base, n); accepted > 0 {
		w.t.Errorf("%d bookings were answered 201 while /readyz said the storage is full", accepted)
	}
}

// expectRefusedWhileFull is expectNo201WhileFull where a booking may
// legitimately be confirmed now and then (see TestFullIndexDiskRecovers):
// at most a quarter of those sent while /readyz said full.
func (w *diskWorld) expectRefusedWhileFull(base string, n int) {
	w.t.Helper()
	if accepted, sent := w.bookWhileFull(base, n); accepted > sent/4 {
		w.t.Errorf("%d of %d bookings were answered 201 while /readyz said the storage is full", accepted, sent)
	}
}

// bookWhileFull books, each time between two answers of /readyz, until n
// bookings were sent while both answers said the storage is full (at most
// 10n tries: a commit that fits into the index file's free pages clears
// the state until the next one fails, so /readyz may flap), and returns
// how many of those were answered 201 and how many there were. Fewer than
// n/2 is an error.
func (w *diskWorld) bookWhileFull(base string, n int) (accepted, sent int) {
	w.t.Helper()
	full := func() bool {
		code, body := readyz(base)
		return code == 503 && strings.Contains(body, "storage full")
	}
	for tries := 0; sent < n && tries < 10*n; tries++ {
		before := full()
		st := w.book(base)
		if !before || !full() {
			continue
		}
		sent++
		if st == 201 {
			accepted++
		}
	}
	if sent < n/2 {
		w.t.Errorf("in %d tries only %d bookings were sent while /readyz said the storage is full (want %d)", 10*n, sent, n/2)
	}
	return accepted, sent
}

// until201 books until one is answered 201 and returns how long it took;
// it fails the test after within.
func (w *diskWorld) until201(base string, within time.Duration) time.Duration {
	w.t.Helper()
	began := time.Now()
	for time.Since(began) < within {
		if w.book(base) == 201 {
			return time.Since(began)
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.t.Fatalf("no booking answered 201 within %s of freeing the disk; answers so far: %v", within, w.counts())
	return 0
}

func (w *diskWorld) counts() map[int]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[int]int{}
	for k, v := range w.statuses {
		out[k] = v
	}
	return out
}

// checkAll checks that every 201 is in the lists (unchanged), that each 202
// was decided and a confirmation among them is in the lists too, and that
// nothing overlaps (listAll).
func (w *diskWorld) checkAll(base string) {
	w.t.Helper()
	w.mu.Lock()
	confirmed := make(map[string]booking, len(w.confirmed))
	for id, b := range w.confirmed {
		confirmed[id] = b
	}
	pending := append([]string(nil), w.pending...)
	w.mu.Unlock()
	// The 202s are decided first: one decided after the lists were read
	// would be missing from them.
	outcomes := map[string][]byte{}
	for _, loc := range pending {
		if status, body := w.outcome(base, loc); status == 201 {
			outcomes[loc] = body
		}
	}
	found := map[string]booking{}
	for _, c := range diskCals {
		for id, b := range listAll(w.t, base, c) {
			found[id] = b
		}
	}
	for id, b := range confirmed {
		got, ok := found[id]
		switch {
		case !ok:
			w.t.Errorf("booking %s (calendar %s) was answered 201 and is gone", id, w.calOf[id])
		case !got.Start.Equal(b.Start) || !got.End.Equal(b.End):
			w.t.Errorf("booking %s changed: %+v -> %+v", id, b, got)
		}
	}
	for loc, body := range outcomes { // the others were refused, or undecided (reported by outcome)
		var bk booking
		if err := json.Unmarshal(body, &bk); err != nil {
			w.t.Errorf("outcome %s: %v", loc, err)
		} else if _, ok := found[bk.ID]; !ok {
			w.t.Errorf("the 202 at %s was decided as booking %s, which is not in the list", loc, bk.ID)
		}
	}
}

// outcome reads a 202's Location until it is decided.
func (w *diskWorld) outcome(base, loc string) (int, []byte) {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := w.client.Get(base + loc)
		if err != nil {
			w.t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 202 {
			return resp.StatusCode, b
		}
		if time.Now().After(deadline) {
			w.t.Errorf("%s still pending after the disk had room again", loc)
			return 202, b
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (w *diskWorld) verify(logs, base string) {
	w.t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if code := Main(ctx, []string{"verify", "--url", base, "--nats-url", natsURLOf(w.t, logs)}, &out, &errb); code != 0 {
		w.t.Errorf("verify exit %d:\n%s%s", code, out.String(), errb.String())
	}
}

// stuffStreams publishes mib messages of almost 1 MiB each to the command
// stream (the writers reject them as invalid), so that the streams hold
// most of the disk.
func (w *diskWorld) stuffStreams(natsURL string, mib int) {
	w.t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		w.t.Fatal(err)
	}
	defer nc.Close()
	junk := bytes.Repeat([]byte("x"), queue.MaxMessageBytes-4096)
	for i := range mib {
		m, err := nc.Request(queue.CommandSubject("full-junk"), junk, 10*time.Second)
		if err != nil {
			w.t.Fatalf("junk %d: %v", i, err)
		}
		if bytes.Contains(m.Data, []byte(`"error"`)) {
			w.t.Fatalf("junk %d refused: %s", i, m.Data)
		}
	}
}

// TestNATSStoreLimitFlags: --nats-max-store and --nats-max-memory are read
// from the command line, BOOKLINE_NATS_MAX_STORE and the config file, are
// refused with --nats-url, and the store limit takes effect: with
// BOOKLINE_NATS_MAX_STORE=2MiB and more in the streams, /readyz says the
// storage is full and to raise the flag.
func TestNATSStoreLimitFlags(t *testing.T) {
	dir := t.TempDir()
	serve := func(args ...string) string {
		var out, errb bytes.Buffer
		args = append([]string{"serve", "--data-dir", filepath.Join(dir, "d"), "--nats-listen", "", "--http-addr", "127.0.0.1:0"}, args...)
		// Bounded: a serve that wrongly starts ends with the context.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if code := Main(ctx, args, &out, &errb); code == 0 {
			t.Errorf("serve %v started", args)
		}
		return errb.String()
	}
	if e := serve("--nats-max-store", "lots"); !strings.Contains(e, "nats-max-store") {
		t.Errorf("a bad --nats-max-store: %s", e)
	}
	if e := serve("--nats-max-memory", "10KiB"); !strings.Contains(e, "nats-max-memory") {
		t.Errorf("a bad --nats-max-memory: %s", e)
	}
	if e := serve("--nats-max-store", "1GiB", "--nats-url", "nats://127.0.0.1:1"); !strings.Contains(e, "embedded NATS server") {
		t.Errorf("--nats-max-store with --nats-url: %s", e)
	}
	cfg := filepath.Join(dir, "c.json")
	if err := os.WriteFile(cfg, []byte(`{"nats-max-store": "lots"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if e := serve("--config", cfg); !strings.Contains(e, "nats-max-store") {
		t.Errorf("a bad nats-max-store in the config file: %s", e)
	}
	t.Setenv("BOOKLINE_NATS_MAX_STORE", "lots")
	if e := serve(); !strings.Contains(e, "BOOKLINE_NATS_MAX_STORE") {
		t.Errorf("a bad BOOKLINE_NATS_MAX_STORE: %s", e)
	}
	var out, errb bytes.Buffer
	if Main(context.Background(), []string{"serve", "--help"}, &out, &errb); !strings.Contains(errb.String(), "--nats-max-store") ||
		!strings.Contains(errb.String(), "BOOKLINE_NATS_MAX_MEMORY") {
		t.Errorf("help lacks the NATS store limits:\n%s", errb.String())
	}
	if testing.Short() {
		return
	}

	t.Setenv("BOOKLINE_NATS_MAX_STORE", "2MiB")
	p := startProc(t, "serve", "--data-dir", filepath.Join(dir, "live"), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0")
	w := newDiskWorld(t)
	w.createCalendars(p.URL)
	nc, err := nats.Connect(natsURLOf(t, p.output()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	junk := bytes.Repeat([]byte("x"), queue.MaxMessageBytes-4096)
	for i := 0; i < 3; i++ {
		if _, err := nc.Request(queue.CommandSubject("lim-junk"), junk, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	reason := waitReadyz(t, p.URL, 10*time.Second, func(code int, body string) bool {
		return code == 503 && strings.Contains(body, "storage full") && strings.Contains(body, "raise --nats-max-store")
	})
	if !strings.Contains(reason, "store limit of 2.0 MiB") {
		t.Errorf("readyz does not name the limit: %s", reason)
	}
	if st := w.book(p.URL); st != 503 {
		t.Errorf("a booking over the store limit: %d, want 503", st)
	}
}
