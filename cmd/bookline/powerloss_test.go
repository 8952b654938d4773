package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data/powerfs"
	"github.com/bookline/bookline/queue"
)

// TestPowerLossKeepsEveryAnswer runs `bookline serve` on a file system that
// forgets everything not fsynced when the power is cut (data/powerfs), under
// load: 64 HTTP clients on a few contended calendars, with and without
// Idempotency-Key, booking, cancelling, rescheduling and retrying, and an
// importer publishing straight to NATS. It cuts the power at a random moment,
// again and again, and restarts bookline on what survived each time. After
// every restart it checks that
//
//   - bookline starts on its own and becomes ready;
//   - every decided answer survived: each booking answered 201 (or accepted
//     in an importer's reply) is there, with the interval and status of the
//     last answer about it;
//   - no two confirmed bookings of a calendar overlap;
//   - no request id is answered two ways: a retry of an answered keyed
//     request gets the same status and body;
//   - the index equals a replay of the stream (bookline verify, every few
//     cuts and at the end).
//
// BOOKLINE_POWERLOSS_SYNC=interval runs it against --sync interval, which
// is allowed to lose answers: it reports what it lost instead of failing on
// it. BOOKLINE_POWERLOSS_CUTS sets the number of cuts (default 6).
func TestPowerLossKeepsEveryAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess and FUSE test")
	}
	if err := powerfs.Available(); err != nil {
		t.Skipf("power-loss file system unavailable here: %v", err)
	}
	mode := envOr("BOOKLINE_POWERLOSS_SYNC", "always")
	// 6 cuts keep `make test` nearer its budget (its load now books
	// collectives and pool bookings too, several log rounds each); `make
	// faults` runs 40.
	cuts, err := strconv.Atoi(envOr("BOOKLINE_POWERLOSS_CUTS", "6"))
	if err != nil || cuts < 1 {
		t.Fatalf("BOOKLINE_POWERLOSS_CUTS: %v", err)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("BOOKLINE_POWERLOSS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("mode --sync %s, %d cuts, seed %d (BOOKLINE_POWERLOSS_SEED)", mode, cuts, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	backing, mnt := t.TempDir(), t.TempDir()
	w := newPowerWorld(mode)
	var totals powerTotals
	for cut := 0; cut <= cuts; cut++ {
		fs, err := powerfs.Mount(backing, mnt, powerfs.Options{})
		if err != nil {
			t.Fatalf("mount: %v", err)
		}
		p := startPowerProc(t, filepath.Join(mnt, "data"), mode)
		w.connect(t, p)
		w.ensureCalendars(t)
		w.check(t, cut, &totals)
		if cut%5 == 0 || cut == cuts {
			w.verify(t)
		}
		if cut == cuts {
			// The last start: stop cleanly, no cut.
			p.stop(t)
			w.close()
			if err := fs.Unmount(); err != nil {
				t.Fatalf("unmount: %v", err)
			}
			break
		}
		// Load, then the power cut at a random moment.
		load := w.startLoad(rng.Uint64(), cut)
		if cut == 0 {
			// A collective and a pool booking take several rounds of
			// the log, each fsynced: on a loaded machine none may finish
			// before a cut. The first cut waits (20 s at most) until some
			// of each were decided, so that every run has them.
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) &&
				(w.collectivesDecided.Load() == 0 || w.poolDecided.Load() == 0); time.Sleep(20 * time.Millisecond) {
			}
		}
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		inFlight := w.inFlight.Load()
		fs.Cut()
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		load.stop()
		_ = p.waitExit()
		w.close()
		if err := fs.Unmount(); err != nil {
			t.Fatalf("unmount after the cut: %v", err)
		}
		rs, err := fs.Revert()
		if err != nil {
			t.Fatalf("revert: %v", err)
		}
		simulateReboot(t, filepath.Join(backing, "data"), cut)
		st := fs.Stats()
		totals.inFlight = append(totals.inFlight, int(inFlight))
		t.Logf("cut %2d: %d requests in flight, %d answers so far; lost %d unsynced bytes in %d files, undid %d namespace ops (%d fsyncs, %d directory fsyncs)",
			cut+1, inFlight, w.answers.Load(), rs.BytesLost, rs.FilesReverted, rs.NamespaceOpsUndone, st.Fsyncs, st.DirFsyncs)
	}
	sort.Ints(totals.inFlight)
	t.Logf("--sync %s: %d cuts; requests in flight at a cut: median %d, max %d; %d decided answers checked; lost: %d bookings answered as confirmed, %d answers changed, %d overlaps",
		mode, cuts, median(totals.inFlight), totals.inFlight[len(totals.inFlight)-1], w.answers.Load(), totals.lost, totals.changed, totals.overlaps)
	if mode == "always" && totals.lost+totals.changed+totals.overlaps > 0 {
		t.Errorf("--sync always lost %d confirmed bookings, changed %d answers and let %d bookings overlap", totals.lost, totals.changed, totals.overlaps)
	}
	if totals.overlaps > 0 {
		t.Errorf("%d overlapping bookings", totals.overlaps)
	}
	t.Logf("series booked: %d; cancels from an occurrence on: %d", w.seriesBooked.Load(), w.followingCancelled.Load())
	if w.seriesBooked.Load() == 0 || w.followingCancelled.Load() == 0 {
		t.Errorf("the load booked %d series and cancelled from an occurrence on %d times: it must do both",
			w.seriesBooked.Load(), w.followingCancelled.Load())
	}
	t.Logf("collectives decided: %d, booked: %d, cancelled: %d; parts pending after a restart, resolved: %d; pool bookings decided: %d, booked: %d",
		w.collectivesDecided.Load(), w.collectivesBooked.Load(), w.collectivesCancelled.Load(), w.pendingResolved.Load(),
		w.poolDecided.Load(), w.poolBooked.Load())
	// A collective and a pool booking take several rounds of the log: on
	// a loaded machine few finish between cuts, so what is required is
	// that some of each were decided.
	if w.collectivesDecided.Load() == 0 || w.poolDecided.Load() == 0 {
		t.Errorf("the load had %d collectives and %d pool bookings decided: it must have both",
			w.collectivesDecided.Load(), w.poolDecided.Load())
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func median(xs []int) int {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)/2]
}

type powerTotals struct {
	lost, changed, overlaps int
	inFlight                []int
}

// simulateReboot makes the restarted bookline see what it sees after a real
// power cut: the kernel's boot id changed. A test cannot reboot, so it
// rewrites the boot id the index's session file recorded.
func simulateReboot(t *testing.T, dataDir string, cut int) {
	t.Helper()
	path := queue.IndexFile(dataDir) + ".session"
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return
	} else if err != nil {
		t.Fatal(err)
	}
	fixed := regexp.MustCompile(` open \S+`).ReplaceAll(b, []byte(" open before-power-cut-"+strconv.Itoa(cut)))
	if err := os.WriteFile(path, fixed, 0o600); err != nil {
		t.Fatal(err)
	}
}

// powerProc is a serve process on the power-loss file system.
type powerProc struct {
	*proc
	natsURL string
}

func startPowerProc(t *testing.T, dataDir, mode string) *powerProc {
	t.Helper()
	p := startProcWithin(t, 3*time.Minute, "serve", "--data-dir", dataDir, "--http-addr", "127.0.0.1:0",
		"--nats-listen", "127.0.0.1:0", "--sync", mode, "--partitions", "2", "--reply-timeout", "20s",
		"--collective-resolve-after", "2s")
	m := natsURLRe.FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("no NATS address in the logs:\n%s", p.output())
	}
	return &powerProc{proc: p, natsURL: m[1]}
}

func (p *powerProc) waitExit() error {
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("process did not exit")
	}
}

func (p *powerProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.waitExit(); err != nil {
		t.Errorf("clean stop: %v\n%s", err, p.output())
	}
}

// The load's calendars: few, so that clients contend for slots.
var powerCalendars = []string{"pl-a", "pl-b", "pl-c", "pl-d"}

var powerBase = time.Date(2030, 3, 4, 0, 0, 0, 0, time.UTC)

// expected is what the answers said about one booking.
type expected struct {
	cal        string
	start, end time.Time
	cancelled  bool
	// uncertain: a cancel or reschedule of it was sent and not answered
	// before the cut, so either outcome is right; resolved by the next
	// check from what the server has.
	uncertain bool
	// owner is the client that may cancel or reschedule it (-1: an
	// importer's, never changed).
	owner int
}

// keyedAnswer is the first answer to an Idempotency-Key.
type keyedAnswer struct {
	cal, key, body string
	// path is where the request went when not the calendar's bookings
	// (a collective's, a pool's).
	path   string
	status int
	reply  []byte
}

func (k *keyedAnswer) url() string {
	if k.path != "" {
		return k.path
	}
	return "/v1/calendars/" + k.cal + "/bookings"
}

// collectiveExp is what the answers said about a collective booking.
type collectiveExp struct {
	cals       []string
	start, end time.Time
	cancelled  bool
	// uncertain: a cancel was sent and not answered (it may have
	// reached only some members: sending it again finishes it).
	uncertain bool
}

// powerWorld is what the clients were told, across cuts.
type powerWorld struct {
	mode string
	http *http.Client

	mu       sync.Mutex
	bookings map[string]*expected // booking id -> what the last answer said
	keyed    []*keyedAnswer
	byOwner  map[int][]string
	// series lists the occurrences of each series booked, by index, under
	// each occurrence's id (skipped ones are absent).
	series map[string][]string
	// collectives are the collective bookings answered 201, by id, and
	// myCollectives each client's.
	collectives   map[string]*collectiveExp
	myCollectives map[int][]string

	answers  atomic.Int64
	inFlight atomic.Int64
	// seriesBooked and followingCancelled count the series answered 201
	// and the cancels with scope following answered 200.
	seriesBooked, followingCancelled atomic.Int64
	// collectivesBooked, collectivesCancelled and poolBooked count the
	// collectives answered 201 and 200, and the pool bookings answered 201.
	collectivesBooked, collectivesCancelled, poolBooked atomic.Int64
	// pendingResolved counts the collective parts found pending after a
	// restart (and then resolved by the node).
	pendingResolved atomic.Int64
	// collectivesDecided and poolDecided count the collectives and pool
	// bookings answered with a decision (booked or refused).
	collectivesDecided, poolDecided atomic.Int64
	// mismatches are live retries of a keyed request that got another
	// answer than the first.
	mismatches []string

	p  *powerProc
	nc *nats.Conn
}

func newPowerWorld(mode string) *powerWorld {
	return &powerWorld{
		mode:     mode,
		http:     &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 128}},
		bookings: map[string]*expected{},
		byOwner:  map[int][]string{},
		series:   map[string][]string{},

		collectives:   map[string]*collectiveExp{},
		myCollectives: map[int][]string{},
	}
}

func (w *powerWorld) connect(t *testing.T, p *powerProc) {
	t.Helper()
	w.p = p
	nc, err := nats.Connect(p.natsURL, nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	w.nc = nc
}

func (w *powerWorld) close() {
	if w.nc != nil {
		w.nc.Close()
		w.nc = nil
	}
	w.http.CloseIdleConnections()
}

func (w *powerWorld) do(method, path, key, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, w.p.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// ensureCalendars creates the calendars (again, with --sync interval,
// whose cut may have taken them).
func (w *powerWorld) ensureCalendars(t *testing.T) {
	t.Helper()
	for _, c := range powerCalendars {
		st, b, err := w.do("PUT", "/v1/calendars/"+c, "", `{"timezone":"Europe/Berlin","name":"power loss"}`)
		if err != nil || (st != 200 && st != 201) {
			t.Fatalf("create calendar %s: %d %v %s", c, st, err, b)
		}
	}
	pool, _ := json.Marshal(map[string]any{"calendar_ids": powerCalendars, "strategy": "least_recently_booked"})
	if st, b, err := w.do("PUT", "/v1/pools/"+powerPool, "", string(pool)); err != nil || (st != 200 && st != 201) {
		t.Fatalf("create pool: %d %v %s", st, err, b)
	}
}

// powerPool is the pool of every power-loss calendar.
const powerPool = "pl-pool"

type answeredBooking struct {
	ID        string    `json:"id"`
	Calendar  string    `json:"calendar_id"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Status    string    `json:"status"`
	Calendars []string  `json:"calendar_ids"`
	// CancelledAt is the log time of the cancel (zero if not cancelled).
	CancelledAt time.Time `json:"cancelled_at"`
}

// check compares the restarted server with every answer given so far.
func (w *powerWorld) check(t *testing.T, cut int, tot *powerTotals) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	lost, changed := 0, 0
	for id, e := range w.bookings {
		st, b, err := w.do("GET", "/v1/calendars/"+e.cal+"/bookings/"+id, "", "")
		if err != nil {
			t.Fatalf("get booking: %v", err)
		}
		if st == 404 {
			lost++
			if w.mode == "always" {
				t.Errorf("after cut %d: booking %s on %s, answered as confirmed, is gone", cut, id, e.cal)
			}
			delete(w.bookings, id)
			continue
		}
		var got answeredBooking
		if st != 200 || json.Unmarshal(b, &got) != nil {
			t.Fatalf("get booking %s: %d %s", id, st, b)
		}
		same := got.Start.Equal(e.start) && got.End.Equal(e.end) && (got.Status == "cancelled") == e.cancelled
		if !same && !e.uncertain {
			changed++
			if w.mode == "always" {
				t.Errorf("after cut %d: booking %s was answered as %v-%v cancelled=%v, now %s %v-%v", cut, id, e.start, e.end, e.cancelled, got.Status, got.Start, got.End)
			}
		}
		e.start, e.end, e.cancelled, e.uncertain = got.Start, got.End, got.Status == "cancelled", false
	}
	// Overlaps, over every calendar.
	overlaps := 0
	for _, c := range powerCalendars {
		var maxEnd time.Time
		var prev string
		for _, b := range w.listAll(t, c) {
			if b.Start.Before(maxEnd) {
				overlaps++
				t.Errorf("after cut %d: %s overlaps %s on %s", cut, b.ID, prev, c)
			}
			if b.End.After(maxEnd) {
				maxEnd, prev = b.End, b.ID
			}
		}
	}
	// Keyed answers: a retry gets the recorded answer (live retries
	// during the load, and now a sample of the keys and the newest ones).
	for _, m := range w.mismatches {
		changed++
		if w.mode == "always" {
			t.Errorf("before cut %d: %s", cut, m)
		}
	}
	w.mismatches = w.mismatches[:0]
	changed += w.checkCollectives(t, cut)
	for i, k := range w.keyed {
		if i%7 != cut%7 && i < len(w.keyed)-400 {
			continue
		}
		st, b, err := w.do("POST", k.url(), k.key, k.body)
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		if st != k.status || !bytes.Equal(b, k.reply) {
			changed++
			if w.mode == "always" {
				t.Errorf("after cut %d: key %s first answered %d %s, now %d %s", cut, k.key, k.status, k.reply, st, b)
			}
			// What it says now is the answer from here on.
			k.status, k.reply = st, b
		}
	}
	tot.lost += lost
	tot.changed += changed
	tot.overlaps += overlaps
}

func (w *powerWorld) listAll(t *testing.T, cal string) []answeredBooking {
	t.Helper()
	var out []answeredBooking
	cursor := ""
	for {
		u := "/v1/calendars/" + cal + "/bookings?limit=1000"
		if cursor != "" {
			u += "&cursor=" + cursor
		}
		st, b, err := w.do("GET", u, "", "")
		if err != nil || st != 200 {
			t.Fatalf("list %s: %d %v %s", cal, st, err, b)
		}
		var page struct {
			Bookings   []answeredBooking `json:"bookings"`
			NextCursor *string           `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Bookings...)
		if page.NextCursor == nil {
			return out
		}
		cursor = *page.NextCursor
	}
}

// verify compares the index with a replay of the stream.
func (w *powerWorld) verify(t *testing.T) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if code := Main(ctx, []string{"verify", "--url", w.p.URL, "--nats-url", w.p.natsURL}, &out, &errb); code != 0 {
		t.Errorf("verify exit %d:\n%s%s", code, out.String(), errb.String())
	}
}

// powerLoad is the running load of one cut.
type powerLoad struct {
	stopped atomic.Bool
	wg      sync.WaitGroup
}

func (l *powerLoad) stop() {
	l.stopped.Store(true)
	l.wg.Wait()
}

// startLoad starts 64 HTTP clients and an importer.
func (w *powerWorld) startLoad(seed uint64, cut int) *powerLoad {
	l := &powerLoad{}
	for c := range 64 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			w.client(l, rand.New(rand.NewPCG(seed, uint64(c))), c, cut)
		}()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		w.importer(l, rand.New(rand.NewPCG(seed, 1000)), cut)
	}()
	return l
}

// powerSlot is a random interval on the contended calendars' grid: 30 minutes
// steps over two days, 30 to 90 minutes long.
func powerSlot(rng *rand.Rand) (time.Time, time.Time) {
	start := powerBase.Add(time.Duration(rng.IntN(96)) * 30 * time.Minute)
	return start, start.Add(time.Duration(1+rng.IntN(3)) * 30 * time.Minute)
}

func powerBookingBody(start, end time.Time, customer string) string {
	return fmt.Sprintf(`{"start":%q,"end":%q,"customer":%q}`, start.Format(time.RFC3339), end.Format(time.RFC3339), customer)
}

func (w *powerWorld) client(l *powerLoad, rng *rand.Rand, c, cut int) {
	for n := 0; !l.stopped.Load(); n++ {
		w.mu.Lock()
		mine := w.byOwner[c]
		var keyed *keyedAnswer
		if len(w.keyed) > 0 {
			keyed = w.keyed[rng.IntN(len(w.keyed))]
		}
		w.mu.Unlock()
		switch op := rng.IntN(100); {
		case op < 12 && len(mine) > 0:
			w.cancel(mine[rng.IntN(len(mine))])
		case op < 24 && len(mine) > 0:
			w.reschedule(mine[rng.IntN(len(mine))], rng)
		case op < 32 && keyed != nil:
			w.retry(keyed)
		case op < 36 && len(mine) > 0:
			w.cancelFollowing(mine[rng.IntN(len(mine))])
		case op < 44:
			key := ""
			if rng.IntN(2) == 0 {
				key = fmt.Sprintf("pls-%d-%d-%d", cut, c, n)
			}
			w.bookSeries(powerCalendars[rng.IntN(len(powerCalendars))], key, c, rng)
		case op < 52:
			key := ""
			if rng.IntN(2) == 0 {
				key = fmt.Sprintf("plc-%d-%d-%d", cut, c, n)
			}
			w.bookCollective(key, c, rng)
		case op < 55:
			w.mu.Lock()
			mc := w.myCollectives[c]
			w.mu.Unlock()
			if len(mc) > 0 {
				w.cancelCollective(mc[rng.IntN(len(mc))])
			}
		case op < 61:
			key := ""
			if rng.IntN(2) == 0 {
				key = fmt.Sprintf("plp-%d-%d-%d", cut, c, n)
			}
			w.bookPool(key, c, rng)
		default:
			key := ""
			if rng.IntN(2) == 0 {
				key = fmt.Sprintf("pl-%d-%d-%d", cut, c, n)
			}
			w.book(powerCalendars[rng.IntN(len(powerCalendars))], key, c, rng)
		}
	}
}

func (w *powerWorld) book(cal, key string, owner int, rng *rand.Rand) {
	start, end := powerSlot(rng)
	body := powerBookingBody(start, end, "client-"+strconv.Itoa(owner))
	w.inFlight.Add(1)
	st, b, err := w.do("POST", "/v1/calendars/"+cal+"/bookings", key, body)
	w.inFlight.Add(-1)
	if err != nil || st >= 500 || st == 202 {
		return // not decided (or not told): either outcome is right
	}
	w.answers.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if key != "" {
		w.keyed = append(w.keyed, &keyedAnswer{cal: cal, key: key, body: body, status: st, reply: b})
	}
	if st == 201 {
		var bk answeredBooking
		if json.Unmarshal(b, &bk) == nil {
			if _, seen := w.bookings[bk.ID]; !seen {
				w.bookings[bk.ID] = &expected{cal: cal, start: bk.Start, end: bk.End, owner: owner}
				w.byOwner[owner] = append(w.byOwner[owner], bk.ID)
			}
		}
	}
}

// bookSeries books a daily series of 2 to 4 occurrences, all or none, or
// the free ones.
func (w *powerWorld) bookSeries(cal, key string, owner int, rng *rand.Rand) {
	start, end := powerSlot(rng)
	onConflict := [2]string{"fail", "skip"}[rng.IntN(2)]
	body := fmt.Sprintf(`{"start":%q,"end":%q,"customer":"client-%d","recurrence":{"freq":"daily","count":%d},"on_conflict":%q}`,
		start.Format(time.RFC3339), end.Format(time.RFC3339), owner, 2+rng.IntN(3), onConflict)
	w.inFlight.Add(1)
	st, b, err := w.do("POST", "/v1/calendars/"+cal+"/bookings", key, body)
	w.inFlight.Add(-1)
	if err != nil || st >= 500 || st == 202 {
		return
	}
	w.answers.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if key != "" {
		w.keyed = append(w.keyed, &keyedAnswer{cal: cal, key: key, body: body, status: st, reply: b})
	}
	var a struct {
		Occurrences []struct {
			Start     time.Time `json:"start"`
			End       time.Time `json:"end"`
			Status    string    `json:"status"`
			BookingID string    `json:"booking_id"`
		} `json:"occurrences"`
	}
	if st != 201 || json.Unmarshal(b, &a) != nil {
		return
	}
	w.seriesBooked.Add(1)
	var ids []string
	for _, o := range a.Occurrences {
		if o.Status != "confirmed" {
			continue
		}
		ids = append(ids, o.BookingID)
		if _, seen := w.bookings[o.BookingID]; !seen {
			w.bookings[o.BookingID] = &expected{cal: cal, start: o.Start, end: o.End, owner: owner}
			w.byOwner[owner] = append(w.byOwner[owner], o.BookingID)
		}
	}
	for _, id := range ids {
		w.series[id] = ids
	}
}

// cancelFollowing cancels an occurrence of a series and the later ones.
func (w *powerWorld) cancelFollowing(id string) {
	w.mu.Lock()
	e, occ := w.bookings[id], w.series[id]
	from := slices.Index(occ, id)
	if e == nil || from < 0 {
		w.mu.Unlock()
		return
	}
	for _, o := range occ[from:] {
		if oe := w.bookings[o]; oe != nil {
			oe.uncertain = true
		}
	}
	w.mu.Unlock()
	w.inFlight.Add(1)
	st, b, err := w.do("DELETE", "/v1/calendars/"+e.cal+"/bookings/"+id+"?scope=following", "", "")
	w.inFlight.Add(-1)
	var a struct {
		Occurrences []answeredBooking `json:"occurrences"`
	}
	if err != nil || st != 200 || json.Unmarshal(b, &a) != nil {
		return
	}
	w.answers.Add(1)
	w.followingCancelled.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range occ[from:] {
		if oe := w.bookings[o]; oe != nil {
			oe.cancelled, oe.uncertain = true, false
		}
	}
}

func (w *powerWorld) markUncertain(id string) *expected {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.bookings[id]
	if e != nil {
		e.uncertain = true
	}
	return e
}

func (w *powerWorld) cancel(id string) {
	e := w.markUncertain(id)
	if e == nil {
		return
	}
	w.inFlight.Add(1)
	st, b, err := w.do("DELETE", "/v1/calendars/"+e.cal+"/bookings/"+id, "", "")
	w.inFlight.Add(-1)
	if err != nil || st != 200 {
		return
	}
	var bk answeredBooking
	if json.Unmarshal(b, &bk) != nil {
		return
	}
	w.answers.Add(1)
	w.mu.Lock()
	e.cancelled, e.uncertain = bk.Status == "cancelled", false
	w.mu.Unlock()
}

func (w *powerWorld) reschedule(id string, rng *rand.Rand) {
	e := w.markUncertain(id)
	if e == nil {
		return
	}
	start, end := powerSlot(rng)
	w.inFlight.Add(1)
	st, b, err := w.do("POST", "/v1/calendars/"+e.cal+"/bookings/"+id+"/reschedule", "",
		fmt.Sprintf(`{"start":%q,"end":%q}`, start.Format(time.RFC3339), end.Format(time.RFC3339)))
	w.inFlight.Add(-1)
	if err != nil || st >= 500 || st == 202 {
		return
	}
	w.answers.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if st == 200 {
		var bk answeredBooking
		if json.Unmarshal(b, &bk) == nil {
			e.start, e.end, e.cancelled = bk.Start, bk.End, bk.Status == "cancelled"
		}
	}
	e.uncertain = false // refused (409, 422): unchanged
}

// retry sends an answered keyed request again: the same answer, live.
func (w *powerWorld) retry(k *keyedAnswer) {
	w.inFlight.Add(1)
	st, b, err := w.do("POST", k.url(), k.key, k.body)
	w.inFlight.Add(-1)
	if err != nil || st >= 500 || st == 202 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if st != k.status || !bytes.Equal(b, k.reply) {
		w.mismatches = append(w.mismatches, fmt.Sprintf("key %s first answered %d %s, on a retry %d %s", k.key, k.status, k.reply, st, b))
		k.status, k.reply = st, b
	}
}

// importer publishes booking.create commands straight to the stream, as
// batch importers do, and records the accepted outcomes it is told.
func (w *powerWorld) importer(l *powerLoad, rng *rand.Rand, cut int) {
	nc := w.nc
	if nc == nil {
		return
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(64))
	if err != nil {
		return
	}
	inbox := nats.NewInbox()
	replies := make(chan *nats.Msg, 4096)
	sub, err := nc.ChanSubscribe(inbox+".*", replies)
	if err != nil {
		return
	}
	defer sub.Unsubscribe()
	calOf := map[string]string{}
	for n := 0; !l.stopped.Load(); n++ {
		cal := powerCalendars[rng.IntN(len(powerCalendars))]
		start, end := powerSlot(rng)
		reqID := fmt.Sprintf("imp-%d-%d", cut, n)
		body, _ := json.Marshal(map[string]any{"v": actor.SchemaVersion, "type": "booking.create", "request_id": reqID, "calendar_id": cal,
			"booking": map[string]any{"start": start, "end": end, "customer": "importer"}})
		m := nats.NewMsg(queue.CommandSubject(cal))
		m.Data = body
		m.Header.Set(queue.HeaderSchema, strconv.Itoa(actor.SchemaVersion))
		m.Header.Set(queue.HeaderReplyTo, inbox+"."+reqID)
		calOf[inbox+"."+reqID] = cal
		if _, err := js.PublishMsgAsync(m, jetstream.WithMsgID(cal+":"+reqID)); err != nil {
			return
		}
	drain:
		for {
			select {
			case r := <-replies:
				w.importReply(r, calOf[r.Subject])
			case <-time.After(2 * time.Millisecond):
				break drain
			}
		}
	}
}

func (w *powerWorld) importReply(r *nats.Msg, cal string) {
	var rep struct {
		Outcome string          `json:"outcome"`
		Booking answeredBooking `json:"booking"`
	}
	if json.Unmarshal(r.Data, &rep) != nil || cal == "" {
		return
	}
	w.answers.Add(1)
	if rep.Outcome != "accepted" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.bookings[rep.Booking.ID]; !seen {
		w.bookings[rep.Booking.ID] = &expected{cal: cal, start: rep.Booking.Start, end: rep.Booking.End, owner: -1}
	}
}

// bookCollective books one interval on two or three of the calendars
// (their partitions differ for some pairs), all or none. Its intervals are
// on the two days after powerSlot's, where only collectives book: on the
// contended days nearly every collective found some member taken.
func (w *powerWorld) bookCollective(key string, owner int, rng *rand.Rand) {
	cals := slices.Clone(powerCalendars)
	rng.Shuffle(len(cals), func(i, j int) { cals[i], cals[j] = cals[j], cals[i] })
	cals = cals[:2+rng.IntN(2)]
	start, end := powerSlot(rng)
	start, end = start.Add(48*time.Hour), end.Add(48*time.Hour)
	ids, _ := json.Marshal(cals)
	body := fmt.Sprintf(`{"calendar_ids":%s,"start":%q,"end":%q,"customer":"client-%d"}`, ids, start.Format(time.RFC3339), end.Format(time.RFC3339), owner)
	w.inFlight.Add(1)
	st, b, err := w.do("POST", "/v1/bookings", key, body)
	w.inFlight.Add(-1)
	if err != nil || st >= 500 || st == 202 {
		return
	}
	w.answers.Add(1)
	w.collectivesDecided.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if key != "" {
		w.keyed = append(w.keyed, &keyedAnswer{key: key, path: "/v1/bookings", body: body, status: st, reply: b})
	}
	var a answeredBooking
	if st != 201 || json.Unmarshal(b, &a) != nil {
		return
	}
	w.collectivesBooked.Add(1)
	if _, seen := w.collectives[a.ID]; !seen {
		w.collectives[a.ID] = &collectiveExp{cals: a.Calendars, start: a.Start, end: a.End}
		w.myCollectives[owner] = append(w.myCollectives[owner], a.ID)
	}
}

// cancelCollective cancels a collective on every member.
func (w *powerWorld) cancelCollective(id string) {
	w.mu.Lock()
	e := w.collectives[id]
	if e == nil || e.cancelled {
		w.mu.Unlock()
		return
	}
	e.uncertain = true
	cal := e.cals[0]
	w.mu.Unlock()
	w.inFlight.Add(1)
	st, _, err := w.do("DELETE", "/v1/calendars/"+cal+"/bookings/"+id, "", "")
	w.inFlight.Add(-1)
	if err != nil || st != 200 {
		return
	}
	w.answers.Add(1)
	w.collectivesCancelled.Add(1)
	w.mu.Lock()
	e.cancelled, e.uncertain = true, false
	w.mu.Unlock()
}

// bookPool books one calendar of the pool; the booking is then checked as
// any booking.
func (w *powerWorld) bookPool(key string, owner int, rng *rand.Rand) {
	start, end := powerSlot(rng)
	body := powerBookingBody(start, end, "client-"+strconv.Itoa(owner))
	path := "/v1/pools/" + powerPool + "/bookings"
	w.inFlight.Add(1)
	st, b, err := w.do("POST", path, key, body)
	w.inFlight.Add(-1)
	if err != nil || st >= 500 || st == 202 {
		return
	}
	w.answers.Add(1)
	w.poolDecided.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if key != "" {
		w.keyed = append(w.keyed, &keyedAnswer{key: key, path: path, body: body, status: st, reply: b})
	}
	var bk answeredBooking
	if st != 201 || json.Unmarshal(b, &bk) != nil {
		return
	}
	w.poolBooked.Add(1)
	if _, seen := w.bookings[bk.ID]; !seen {
		w.bookings[bk.ID] = &expected{cal: bk.Calendar, start: bk.Start, end: bk.End, owner: owner}
		w.byOwner[owner] = append(w.byOwner[owner], bk.ID)
	}
}

// checkCollectives checks, once the restarted node has resolved every
// part left pending, that every collective is on all of its calendars or
// on none, and that each one answered 201 is there with what the last
// answer said. It returns how many answers changed. Called with w.mu held.
func (w *powerWorld) checkCollectives(t *testing.T, cut int) (changed int) {
	t.Helper()
	// Parts pending at the cut are resolved by their partition's owner
	// (--collective-resolve-after 2s).
	var listed map[string]map[string]answeredBooking // id -> calendar -> part
	began := time.Now()
	deadline := began.Add(90 * time.Second)
	firstPending := -1
	for {
		listed = map[string]map[string]answeredBooking{}
		pending := 0
		for _, c := range powerCalendars {
			for _, b := range w.listAll(t, c) {
				if len(b.Calendars) == 0 {
					continue
				}
				if b.Status == "pending" {
					pending++
				}
				if listed[b.ID] == nil {
					listed[b.ID] = map[string]answeredBooking{}
				}
				listed[b.ID][c] = b
			}
		}
		if firstPending < 0 {
			firstPending = pending
		}
		if pending == 0 {
			if firstPending > 0 {
				w.pendingResolved.Add(int64(firstPending))
				t.Logf("after cut %d: %d collective parts were pending; resolved within %s", cut, firstPending, time.Since(began).Round(100*time.Millisecond))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after cut %d: %d collective parts still pending after 90 s", cut, pending)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// All or none: a collective listed (confirmed) on one member is listed
	// on every member, unless a cancel of it was cut short: sending it
	// again finishes it.
	for id, parts := range listed {
		var cals []string
		for _, p := range parts {
			cals = p.Calendars
			break
		}
		if len(parts) == len(cals) {
			continue
		}
		if e := w.collectives[id]; e != nil && e.uncertain {
			if st, b, err := w.do("DELETE", "/v1/calendars/"+cals[0]+"/bookings/"+id, "", ""); err != nil || st != 200 {
				t.Fatalf("after cut %d: finishing the cancel of %s: %d %v %s", cut, id, st, err, b)
			}
			e.cancelled, e.uncertain = true, false
			continue
		}
		t.Errorf("after cut %d: collective %s of %v is listed on %d of its calendars", cut, id, cals, len(parts))
		changed++
	}
	// Every collective answered: there, as last answered.
	for id, e := range w.collectives {
		confirmed := 0
		for _, c := range e.cals {
			st, b, err := w.do("GET", "/v1/calendars/"+c+"/bookings/"+id, "", "")
			var got answeredBooking
			if err != nil || st != 200 || json.Unmarshal(b, &got) != nil {
				t.Errorf("after cut %d: collective %s answered 201 is not on %s: %d %v %s", cut, id, c, st, err, b)
				changed++
				continue
			}
			if got.Status == "confirmed" {
				confirmed++
			}
		}
		switch {
		case e.uncertain && (confirmed == 0 || confirmed == len(e.cals)):
			e.cancelled, e.uncertain = confirmed == 0, false
		case e.cancelled && confirmed == 0, !e.cancelled && confirmed == len(e.cals):
		default:
			t.Errorf("after cut %d: collective %s (cancelled %v) is confirmed on %d of %d calendars", cut, id, e.cancelled, confirmed, len(e.cals))
			changed++
		}
	}
	return changed
}
