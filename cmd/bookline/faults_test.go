package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bookline/bookline/data/powerfs"
	"github.com/bookline/bookline/queue"
)

// The cluster fault suite, Jepsen style: three real nats-server processes
// (built from the module in go.sum, configured from deploy/nats with
// `sync_interval: always`), each store on its own powerfs mount and every
// route through a proxy the test controls, and two bookline instances
// (`--replicas 3`, takeover 2 s) as subprocesses. Each test runs a
// nemesis under load: HTTP clients booking overlapping intervals on every
// partition through both instances with Idempotency-Keys (retried under
// their key until decided), cancelling some of their bookings, and an
// importer publishing straight to the stream with reply subjects. During
// every fault one bookline instance is killed with SIGKILL too, and
// restarted once the fault healed.
//
// After healing (every node up, links healed, every instance ready) the
// checker (faults_check_test.go) asks every instance for every booking
// answered 201 or accepted, every decided answer's record, every
// acknowledged import's stream sequence; looks for overlaps, requests
// answered two ways, digests that differ, and runs `bookline verify`
// against each instance. It reports losses with their count and which,
// and fails on any with `sync_interval: always`.
//
// The short variant (the default, in `make test`) runs each nemesis once,
// with small loads: one of its two kinds, which the seed picks, so that
// runs meet both in turn and the suite stays within CI's time. BOOKLINE_FAULTS_LONG=1 (`make faults`) runs
// more clients and cycles with random fault lengths and checks after
// every cycle; BOOKLINE_FAULTS_SEED repeats a run's random choices (the
// timing of the processes is not reproducible).

// faultConfig is the size of a run.
type faultConfig struct {
	long               bool
	seed               uint64
	clients            int
	cycles             int // fault cycles per test, alternating the nemesis's kinds
	warmup             time.Duration
	faultMin, faultMax time.Duration
	takeover           time.Duration
	lazyCuts           int // power cuts the lazy test may take to lose something
}

func faultSettings(t *testing.T) faultConfig {
	if testing.Short() {
		t.Skip("multi-process fault suite")
	}
	cfg := faultConfig{seed: uint64(time.Now().UnixNano()), clients: 6, cycles: 1, warmup: 500 * time.Millisecond,
		faultMin: 2 * time.Second, faultMax: 3 * time.Second, takeover: 2 * time.Second, lazyCuts: 3}
	if os.Getenv("BOOKLINE_FAULTS_LONG") != "" {
		cfg.long, cfg.clients, cfg.cycles, cfg.warmup = true, 24, 10, 4*time.Second
		cfg.faultMin, cfg.faultMax, cfg.lazyCuts = 4*time.Second, 15*time.Second, 5
	}
	if s := os.Getenv("BOOKLINE_FAULTS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BOOKLINE_FAULTS_SEED: %v", err)
		}
		cfg.seed = seed
	}
	t.Logf("long %v, seed %d (BOOKLINE_FAULTS_SEED), %d clients, %d cycles from kind %d", cfg.long, cfg.seed, cfg.clients, cfg.cycles, cfg.kind(0))
	return cfg
}

// kind is which of a nemesis's two kinds cycle runs: they alternate, from
// one the seed picks, so that the short run (one cycle per test) meets
// each kind in turn over runs, and a seed repeats its run's.
func (cfg faultConfig) kind(cycle int) int { return (cycle + int(cfg.seed%2)) % 2 }

// faultPartitions is the command stream's partition count in the suite;
// faultCalendars puts one calendar on each.
const faultPartitions = 4

func faultCalendars() []string {
	var cals []string
	seen := map[int]bool{}
	for i := 0; len(cals) < faultPartitions; i++ {
		c := fmt.Sprintf("fault-%d", i)
		if p := queue.PartitionOf(c, faultPartitions); !seen[p] {
			seen[p] = true
			cals = append(cals, c)
		}
	}
	return cals
}

// faultRig is one test's cluster, instances and history.
type faultRig struct {
	t     *testing.T
	name  string
	cfg   faultConfig
	rng   *rand.Rand
	nats  *faultCluster
	world *faultWorld
	lazy  bool
	// mounted is the instance whose data directory is on its own powerfs
	// mount (-1: none), cut with the NATS nodes.
	mounted              int
	instFS               *powerfs.FS
	instBacking, instMnt string

	// allowRefusal: an instance that refuses an altered history
	// (bookline_history_mismatch) is a safe outcome, not a failure to
	// heal; refused records that one did.
	allowRefusal, refused bool

	cycles, instanceKills int
	started               time.Time
}

type faultRigOptions struct {
	lazy bool
	// instanceOnPowerFS puts the second instance's data directory on a
	// powerfs mount of its own.
	instanceOnPowerFS bool
}

func newFaultRig(t *testing.T, o faultRigOptions) *faultRig {
	t.Helper()
	cfg := faultSettings(t)
	if !cfg.long {
		// The short variant's tests wait for Raft and takeover timers
		// most of the time: two at a time keep the suite within CI's
		// budget. The long one runs them one by one, for its figures.
		t.Parallel()
	}
	r := &faultRig{t: t, name: t.Name(), cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 7)), lazy: o.lazy, mounted: -1, started: time.Now()}
	r.nats = startFaultCluster(t, o.lazy)
	key := filepath.Join(t.TempDir(), "secrets.key")
	if code, _, errs := runMain("secrets-key", "--out", key); code != 0 {
		t.Fatalf("secrets-key: %s", errs)
	}
	r.world = newFaultWorld(r.nats.bookline(), faultCalendars())
	for i, id := range []string{"a", "b"} {
		dir := t.TempDir()
		if i == 1 && o.instanceOnPowerFS {
			r.mounted, r.instBacking, r.instMnt = i, filepath.Join(t.TempDir(), "backing"), filepath.Join(t.TempDir(), "mnt")
			for _, d := range []string{r.instBacking, r.instMnt} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			r.mountInstance()
			t.Cleanup(func() {
				if r.instFS != nil {
					_ = r.instFS.Unmount()
				}
			})
			dir = filepath.Join(r.instMnt, "data")
		}
		args := []string{"serve", "--nats-url", r.nats.bookline(), "--instance-id", id, "--secrets-key-file", key,
			"--data-dir", dir, "--http-addr", "127.0.0.1:0", "--partitions", strconv.Itoa(faultPartitions),
			"--nats-monitor-urls", r.nats.monitorURLs(), "--replicas", "3",
			"--takeover-timeout", cfg.takeover.String(), "--reply-timeout", "5s"}
		if o.lazy {
			args = append(args, "--allow-lazy-nats-sync")
		}
		r.world.inst = append(r.world.inst, &faultInstance{id: id, args: args})
	}
	r.startInstances()
	for _, c := range r.world.cals {
		st, b, err := r.world.do(r.world.url(0), "PUT", "/v1/calendars/"+c, "", `{"timezone":"Europe/Berlin","name":"fault suite"}`)
		if err != nil || (st != 200 && st != 201) {
			t.Fatalf("create calendar %s: %d %v %s", c, st, err, b)
		}
	}
	t.Cleanup(r.checkRaces)
	return r
}

func (r *faultRig) mountInstance() {
	fs, err := powerfs.Mount(r.instBacking, r.instMnt, powerfs.Options{Journaled: true})
	if err != nil {
		r.t.Fatalf("mount the instance's data directory: %v", err)
	}
	r.instFS = fs
}

// note logs what the nemesis does, with the time since the test started.
func (r *faultRig) note(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("%6.1fs  %s", time.Since(r.started).Seconds(), fmt.Sprintf(format, args...))
}

// startInstances starts every instance that is down, all at once, and
// waits until each is ready.
func (r *faultRig) startInstances() {
	w := r.world
	var started []int
	for i, in := range w.inst {
		w.mu.Lock()
		down := in.p == nil
		w.mu.Unlock()
		if !down {
			continue
		}
		p := spawnProc(r.t, in.args...)
		w.mu.Lock()
		in.procs = append(in.procs, p)
		w.mu.Unlock()
		started = append(started, i)
	}
	for _, i := range started {
		in := w.inst[i]
		p := in.procs[len(in.procs)-1]
		var refusing func(*proc) bool
		if r.allowRefusal {
			// An instance that refuses an altered history does not get
			// ready; that is one of the outcomes allowed.
			refusing = func(p *proc) bool { return strings.Contains(p.output(), "STREAM HISTORY DIFFERS") }
		}
		switch err := p.awaitReadyUnless(r.t, 3*time.Minute, refusing); {
		case errors.Is(err, errNotReadyExpected):
			r.refused = true
			r.note("instance %s refuses an altered history", in.id)
		case err != nil:
			r.t.Fatalf("instance %s: %v:\n%s", in.id, err, p.output())
		}
		w.mu.Lock()
		in.p = p
		w.mu.Unlock()
	}
}

// killInstance ends instance i with SIGKILL (also when paused).
func (r *faultRig) killInstance(i int) {
	w := r.world
	w.mu.Lock()
	p := w.inst[i].p
	w.inst[i].p = nil
	w.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		r.t.Fatalf("instance %s did not die after SIGKILL", w.inst[i].id)
	}
	r.instanceKills++
	r.note("kill -9 of bookline instance %s", w.inst[i].id)
}

func (r *faultRig) signalInstance(i int, sig syscall.Signal) {
	r.world.mu.Lock()
	p := r.world.inst[i].p
	r.world.mu.Unlock()
	if err := p.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("%v to instance %s: %v", sig, r.world.inst[i].id, err)
	}
}

// checkRaces fails the test if any bookline process of it (built with
// the race detector when the tests are) reported a data race.
func (r *faultRig) checkRaces() {
	for _, in := range r.world.inst {
		for _, p := range in.procs {
			if out := p.output(); strings.Contains(out, "WARNING: DATA RACE") {
				i := strings.Index(out, "WARNING: DATA RACE")
				r.t.Errorf("instance %s reported a data race:\n%s", in.id, out[i:min(len(out), i+6000)])
			}
		}
	}
}

// faultDuration is a random length for one fault.
func (r *faultRig) faultDuration() time.Duration {
	return r.cfg.faultMin + time.Duration(r.rng.Int64N(int64(r.cfg.faultMax-r.cfg.faultMin)+1))
}

// window lets a fault last d, killing bookline instance victim (-1: a
// random one) with SIGKILL at a random moment inside it.
func (r *faultRig) window(d time.Duration, victim int) {
	if victim < 0 {
		victim = r.rng.IntN(len(r.world.inst))
	}
	at := time.Duration(r.rng.Int64N(int64(d)))
	time.Sleep(at)
	r.killInstance(victim)
	time.Sleep(d - at)
}

// progress is how many answers decided something so far.
func (r *faultRig) progress() int64 {
	return r.world.stats.decided.Load() + r.world.stats.replies.Load()
}

// awaitProgress waits for n more decided answers: the cluster serves.
func (r *faultRig) awaitProgress(label string, n int64) {
	r.t.Helper()
	from := r.progress()
	if err := pollUntil(2*time.Minute, func() error {
		if got := r.progress() - from; got < n {
			return fmt.Errorf("%d decided answers, want %d", got, n)
		}
		return nil
	}); err != nil {
		if r.allowRefusal && r.historyMismatches() > 0 {
			r.refused = true
			return
		}
		r.t.Fatalf("%s: the cluster does not answer: %v", label, err)
	}
}

// cycle runs one fault under load: the load starts, the nemesis breaks
// something and repairs it (killing a bookline instance on the way), the
// load must get decided answers again, then it stops and everything
// heals.
func (r *faultRig) cycle(label string, nemesis func()) {
	r.cycles++
	r.note("cycle %d: %s", r.cycles, label)
	load := r.world.startLoad(r.rng.Uint64(), fmt.Sprintf("c%d", r.cycles), r.cfg.clients)
	time.Sleep(r.cfg.warmup) // let the load run before the fault
	r.awaitProgress(label+", before the fault", 20)
	nemesis()
	if !r.lazy {
		// A lazy power cut may take the stream from under the running
		// instance; heal restarts it, as an operator would.
		r.awaitProgress(label+", after the fault", 20)
		r.note("the load gets decided answers again")
	}
	load.stop()
	r.heal(label)
}

// heal brings everything back: links, paused and stopped nodes, stopped
// instances; then waits for the NATS cluster to be healthy and every
// instance ready. An instance that does not get ready on its own fails
// the test, unless restartStuck (the lazy power cut, which may take the
// stream itself), where it is restarted, as an operator would.
func (r *faultRig) heal(label string) {
	r.t.Helper()
	c := r.nats
	c.healLinks()
	for _, n := range c.nodes {
		switch {
		case n.cmd == nil:
			c.start(n)
		case n.paused:
			c.resume(n)
		}
	}
	for _, in := range r.world.inst {
		r.world.mu.Lock()
		p := in.p
		r.world.mu.Unlock()
		if p != nil {
			_ = p.cmd.Process.Signal(syscall.SIGCONT) // in case it was paused
		}
	}
	last := time.Now()
	if err := pollUntil(2*time.Minute, func() error {
		err := c.healthy(!r.lazy)
		if err != nil && time.Since(last) > 10*time.Second {
			r.note("NATS not healthy yet: %v", err)
			last = time.Now()
		}
		return err
	}); err != nil {
		r.t.Fatalf("%s: the NATS cluster did not heal: %v", label, err)
	}
	r.note("NATS healthy: %s", c.views())
	r.startInstances()
	wait := 90 * time.Second
	if r.lazy {
		wait = 20 * time.Second
	}
	for i, in := range r.world.inst {
		err := pollUntil(wait, func() error { return r.ready(i) })
		if err == nil {
			continue
		}
		if r.allowRefusal && r.historyMismatches() > 0 {
			r.refused = true
			r.note("instance %s not ready after healing, refusing an altered history: %v", in.id, err)
			continue
		}
		if !r.lazy {
			r.t.Fatalf("%s: instance %s never got ready after healing: %v", label, in.id, err)
		}
		r.note("instance %s not ready %s after healing (%v): restarting it", in.id, wait, err)
		r.killInstance(i)
		r.startInstances()
	}
	r.note("healed: %s", r.nats.views())
}

// ready is nil when instance i answers /healthz 200.
func (r *faultRig) ready(i int) error {
	base := r.world.url(i)
	if base == "" {
		return fmt.Errorf("down")
	}
	st, b, err := r.world.do(base, "GET", "/readyz", "", "")
	if err != nil {
		return err
	}
	if st != http.StatusOK {
		return fmt.Errorf("/readyz %d %s", st, b)
	}
	return nil
}

// owner is the instance the server pins partition p to, by the
// instances' own reports (GET /v1/admin/cluster).
func (r *faultRig) owner(p int) (int, error) {
	var views []string
	for i, in := range r.world.inst {
		base := r.world.url(i)
		if base == "" {
			continue
		}
		st, b, err := r.world.do(base, "GET", "/v1/admin/cluster", "", "")
		var cs queue.ClusterStatus
		if err != nil || st != 200 || json.Unmarshal(b, &cs) != nil {
			views = append(views, fmt.Sprintf("%s: %d %v", in.id, st, err))
			continue
		}
		if slices.Contains(cs.Owned, p) {
			return i, nil
		}
		views = append(views, fmt.Sprintf("%s owns %v", in.id, cs.Owned))
	}
	return -1, fmt.Errorf("nobody owns partition %d: %s", p, strings.Join(views, "; "))
}

// finish checks everything once more, with `bookline verify`, and fails
// the test on any loss.
func (r *faultRig) finish() *faultFindings {
	r.t.Helper()
	f := r.check(r.name, true)
	f.report(r.t, r.name, true)
	r.summary(f)
	return f
}

// summary logs the run's figures in one line, for docs/benchmarks.md.
func (r *faultRig) summary(f *faultFindings) {
	s := &r.world.stats
	r.t.Logf("%s: %.0f s, %d fault cycles, %d instance kills; HTTP %d attempts, %d decided (%d 201, %d refused), %d 202, %d 503, %d transport errors; "+
		"importer %d published, %d acknowledged, %d replies; lost confirmations %d",
		r.name, time.Since(r.started).Seconds(), r.cycles, r.instanceKills, s.attempts.Load(), s.decided.Load(), s.created.Load(), s.refused.Load(),
		s.accepted202.Load(), s.unavailable.Load(), s.transport.Load(), s.published.Load(), s.acked.Load(), s.replies.Load(), f.lostConfirmations())
}

// maybeCheck checks after a cycle in the long variant.
func (r *faultRig) maybeCheck(label string) {
	if !r.cfg.long {
		return
	}
	r.check(label, false).report(r.t, label, !r.lazy)
}

// views says which node leads the command stream.
func (c *faultCluster) views() string {
	leader, err := c.streamLeader()
	if err != nil {
		return err.Error()
	}
	return "stream leader " + leader
}

// TestClusterFaultKill kills NATS nodes with SIGKILL under load and
// restarts them: a minority (one node, the stream leader half the time),
// then a majority (the stream leader and one more: no quorum until they
// are back).
func TestClusterFaultKill(t *testing.T) {
	r := newFaultRig(t, faultRigOptions{})
	for cycle := range r.cfg.cycles {
		majority := r.cfg.kind(cycle) == 1
		label := map[bool]string{false: "kill -9 of a minority of NATS nodes", true: "kill -9 of a majority of NATS nodes"}[majority]
		r.cycle(label, func() {
			victims := r.pickNodes(map[bool]int{false: 1, true: 2}[majority], r.rng.IntN(2) == 0 || majority)
			for _, i := range victims {
				r.nats.kill(r.nats.nodes[i])
			}
			r.note("killed NATS %v", r.nodeNames(victims))
			r.window(r.faultDuration(), -1)
			for _, i := range victims {
				r.nats.start(r.nats.nodes[i])
			}
			r.note("restarted NATS %v", r.nodeNames(victims))
		})
		r.maybeCheck(label)
	}
	r.finish()
}

// leader is the command stream's leader, waited for.
func (r *faultRig) leader() string {
	r.t.Helper()
	var name string
	if err := pollUntil(30*time.Second, func() (err error) { name, err = r.nats.streamLeader(); return err }); err != nil {
		r.t.Fatal(err)
	}
	return name
}

// pickNodes picks n NATS nodes, the stream leader first when leader.
func (r *faultRig) pickNodes(n int, leader bool) []int {
	var out []int
	if leader {
		i, _ := r.nats.node(r.leader())
		out = append(out, i)
	}
	for _, i := range r.rng.Perm(len(r.nats.nodes)) {
		if len(out) < n && !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out
}

func (r *faultRig) nodeNames(idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, r.nats.nodes[i].name)
	}
	return out
}

// TestClusterFaultPause stops processes with SIGSTOP for longer than the
// takeover timeout, then lets them go on with SIGCONT: the bookline
// instance that owns a partition (the other takes it over, and is then
// killed, so the paused one, stale, must serve alone when it wakes), and
// the NATS node that leads the command stream.
func TestClusterFaultPause(t *testing.T) {
	r := newFaultRig(t, faultRigOptions{})
	for cycle := range r.cfg.cycles {
		if r.cfg.kind(cycle) == 0 {
			r.cycle("SIGSTOP of the partition owner", r.pauseOwner)
			r.maybeCheck("SIGSTOP of the partition owner")
			continue
		}
		r.cycle("SIGSTOP of the stream leader", func() {
			name := r.leader()
			_, n := r.nats.node(name)
			r.nats.pause(n)
			r.note("SIGSTOP of NATS %s (stream leader)", name)
			r.window(max(r.faultDuration(), r.cfg.takeover+2*time.Second), -1)
			r.nats.resume(n)
			r.note("SIGCONT of NATS %s; %s", name, r.nats.views())
		})
		r.maybeCheck("SIGSTOP of the stream leader")
	}
	r.finish()
}

// pauseOwner stops the owner of the first calendar's partition, waits
// for the other instance to take the partition over, kills that one, and
// wakes the paused owner after at least twice the takeover timeout.
func (r *faultRig) pauseOwner() {
	p := queue.PartitionOf(r.world.cals[0], faultPartitions)
	var owner int
	if err := pollUntil(30*time.Second, func() (err error) { owner, err = r.owner(p); return err }); err != nil {
		r.t.Fatal(err)
	}
	other := 1 - owner
	r.signalInstance(owner, syscall.SIGSTOP)
	paused := time.Now()
	r.note("SIGSTOP of bookline instance %s (owner of partition %d)", r.world.inst[owner].id, p)
	err := pollUntil(30*time.Second+4*r.cfg.takeover, func() error {
		if i, err := r.owner(p); err != nil || i != other {
			return fmt.Errorf("partition %d not taken over: %v", p, err)
		}
		return nil
	})
	if err != nil {
		r.t.Errorf("instance %s did not take partition %d over from the paused owner: %v", r.world.inst[other].id, p, err)
	} else {
		r.note("instance %s took partition %d over after %.1f s", r.world.inst[other].id, p, time.Since(paused).Seconds())
	}
	d := max(r.faultDuration(), 2*r.cfg.takeover)
	r.window(max(d-time.Since(paused), 100*time.Millisecond), other)
	r.signalInstance(owner, syscall.SIGCONT)
	r.note("SIGCONT of bookline instance %s after %.1f s", r.world.inst[owner].id, time.Since(paused).Seconds())
}

// TestClusterFaultPowerCut cuts the power of all three NATS nodes at once
// (each store's file system drops what was not fsynced) and of one
// bookline instance, whose data directory is on a powerfs mount too, under
// load; then restarts them on what survived. The other instance runs on.
func TestClusterFaultPowerCut(t *testing.T) {
	r := newFaultRig(t, faultRigOptions{instanceOnPowerFS: true})
	for range r.cfg.cycles {
		r.cycle("power cut of every NATS node", func() {
			time.Sleep(time.Duration(r.rng.Int64N(int64(r.cfg.faultMin))))
			r.powerCut()
			time.Sleep(r.faultDuration() / 2)
			for _, n := range r.nats.nodes {
				r.nats.start(n)
			}
			r.note("NATS nodes restarted")
		})
		r.maybeCheck("power cut")
	}
	r.finish()
}

// powerCut cuts the NATS nodes' and the mounted instance's power at the
// same moment and reverts their file systems to what was synced.
func (r *faultRig) powerCut() {
	if r.instFS != nil {
		r.instFS.Cut()
	}
	stats := r.nats.powerCut()
	if r.instFS != nil {
		r.killInstance(r.mounted)
		if err := r.instFS.Unmount(); err != nil {
			r.t.Fatalf("unmount the instance's data: %v", err)
		}
		rs, err := r.instFS.Revert()
		if err != nil {
			r.t.Fatalf("revert the instance's data: %v", err)
		}
		stats = append(stats, rs)
		simulateReboot(r.t, filepath.Join(r.instBacking, "data"), r.cycles)
		r.mountInstance()
	}
	var parts []string
	for _, s := range stats {
		parts = append(parts, fmt.Sprintf("%d B in %d files, %d namespace ops", s.BytesLost, s.FilesReverted, s.NamespaceOpsUndone))
	}
	r.note("power cut: lost unsynced %s", strings.Join(parts, "; "))
}

// TestClusterFaultPartition isolates the NATS node that leads the command
// stream from the other two: every route link to and from it dropped
// (connections reset, new ones refused), then blackholed (connections
// silent, bytes held until the link heals); bookline instances keep
// their client connections to every node.
func TestClusterFaultPartition(t *testing.T) {
	r := newFaultRig(t, faultRigOptions{})
	for cycle := range r.cfg.cycles {
		mode := []linkMode{linkDrop, linkBlackhole}[r.cfg.kind(cycle)]
		label := "partition of the stream leader (" + mode.String() + ")"
		r.cycle(label, func() {
			name := r.leader()
			i, _ := r.nats.node(name)
			r.nats.partition(i, mode)
			r.note("%s isolated (%s)", name, mode)
			start := time.Now()
			// The majority elects another leader (Raft election timeout
			// 4-9 s); the fault lasts at least that long.
			if err := pollUntil(60*time.Second, func() error {
				l, err := r.majorityLeader(i)
				if err == nil && l == name {
					err = fmt.Errorf("still %s", name)
				}
				return err
			}); err != nil {
				t.Errorf("the majority side elected no new stream leader: %v", err)
			} else {
				r.note("new stream leader on the majority side after %.1f s", time.Since(start).Seconds())
			}
			r.window(r.faultDuration(), -1)
			r.nats.healLinks()
			r.note("links healed")
		})
		r.maybeCheck(label)
	}
	r.finish()
}

// majorityLeader is the command stream's leader as the two nodes other
// than isolated see it.
func (r *faultRig) majorityLeader(isolated int) (string, error) {
	var seen []string
	for j, n := range r.nats.nodes {
		if j == isolated {
			continue
		}
		var v struct {
			AccountDetails []struct {
				Streams []struct {
					Name    string `json:"name"`
					Cluster *struct {
						Leader string `json:"leader"`
					} `json:"cluster"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		if err := r.nats.get(n, "/jsz?acc=BOOKLINE&streams=true", &v); err != nil {
			return "", err
		}
		for _, a := range v.AccountDetails {
			for _, s := range a.Streams {
				if s.Name == queue.StreamName && s.Cluster != nil {
					seen = append(seen, s.Cluster.Leader)
				}
			}
		}
	}
	if len(seen) != 2 || seen[0] != seen[1] || seen[0] == "" {
		return "", fmt.Errorf("the majority side sees leaders %q", seen)
	}
	return seen[0], nil
}

// TestClusterFaultCorrupt alters the command stream's block files on one
// NATS node (a minority) while it is down: a single bit flipped, then a
// file truncated. The node is restarted and asked to lead the stream (what
// made Jepsen's NATS lose acknowledged writes). Safe outcomes: the healthy
// majority's history wins (nothing confirmed is lost, nothing overlaps),
// or bookline refuses the altered history and says so
// (bookline_history_mismatch, from the per-partition hash chain).
func TestClusterFaultCorrupt(t *testing.T) {
	r := newFaultRig(t, faultRigOptions{})
	r.allowRefusal = true
	for cycle := 0; cycle < r.cfg.cycles && !r.refused; cycle++ {
		flip := r.cfg.kind(cycle) == 0
		label := map[bool]string{true: "a bit flipped in a minority node's .blk file", false: "a minority node's .blk file truncated"}[flip]
		r.cycle(label, func() {
			i := r.rng.IntN(len(r.nats.nodes))
			n := r.nats.nodes[i]
			r.nats.kill(n)
			var what string
			if flip {
				what = r.nats.flipBit(n, r.rng)
			} else {
				what = r.nats.truncateBlock(n, r.rng)
			}
			r.note("killed NATS %s, altered it: %s", n.name, what)
			r.nats.start(n)
			if err := pollUntil(60*time.Second, func() error { return r.nats.healthy(true) }); err != nil {
				r.note("after restarting %s: %v", n.name, err)
			}
			if err := r.nats.stepDownTo(n.name); err != nil {
				r.note("asking %s to lead: %v", n.name, err)
			} else {
				r.note("asked the stream leader to hand over to %s: %s", n.name, r.nats.views())
			}
			r.window(r.faultDuration(), -1)
		})
		if !r.refused && r.historyMismatches() > 0 {
			r.refused = true
		}
		if r.refused {
			break
		}
		r.maybeCheck(label)
	}
	if r.refused {
		// The hash chain's safe outcome: the instance says so
		// (bookline_history_mismatch) instead of serving the altered
		// history; there is nothing to compare.
		r.note("bookline refused an altered history: bookline_history_mismatch %v", r.historyMismatches())
		return
	}
	r.finish()
}

// historyMismatches sums bookline_history_mismatch over the instances (0
// where the metric does not exist).
func (r *faultRig) historyMismatches() float64 {
	var sum float64
	for i := range r.world.inst {
		base := r.world.url(i)
		if base == "" {
			continue
		}
		st, b, err := r.world.do(base, "GET", "/metrics", "", "")
		if err != nil || st != 200 {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, "bookline_history_mismatch") {
				f := strings.Fields(line)
				if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
					sum += v
				}
			}
		}
	}
	return sum
}

// TestClusterFaultLazyPowerCutLoses shows that the checker bites: the
// power cut of TestClusterFaultPowerCut against servers with NATS's
// default sync (every 2 minutes) and bookline started with
// --allow-lazy-nats-sync loses confirmations, and the checker reports
// them (it cuts up to lazyCuts times until it sees a loss).
func TestClusterFaultLazyPowerCutLoses(t *testing.T) {
	r := newFaultRig(t, faultRigOptions{lazy: true, instanceOnPowerFS: true})
	var lost int
	for cut := 1; cut <= r.cfg.lazyCuts && lost == 0; cut++ {
		r.cycle("power cut of every NATS node, lazy sync", func() {
			time.Sleep(time.Duration(r.rng.Int64N(int64(r.cfg.faultMin))))
			r.powerCut()
			for _, n := range r.nats.nodes {
				r.nats.start(n)
			}
		})
		f := r.check(fmt.Sprintf("lazy power cut %d", cut), false)
		f.report(t, fmt.Sprintf("lazy power cut %d", cut), false)
		lost = f.lostConfirmations()
		r.summary(f)
	}
	if lost == 0 {
		t.Errorf("%d power cuts of servers that sync every 2 minutes lost no confirmation: the checker does not bite", r.cfg.lazyCuts)
	}
}
