package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/bookline/bookline/data/powerfs"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// faultCluster is three real nats-server processes (the binary built from
// the module in go.sum) configured from deploy/nats's files, on free
// loopback ports, each with its JetStream store on its own powerfs mount
// and its routes to the other two through linkProxies, so that a test can
// kill, pause, partition, corrupt and power-cut them.
//
// Routes: node i's `routes` list names its proxies to the other nodes
// (links[i][j] forwards to node j's cluster port), and every node
// advertises 127.0.0.1:1 as its route address. NATS servers tell each
// other the route address of every server they meet and dial it
// ("implicit routes") when they have no route to it yet; a real address
// there would let a partitioned pair find each other around the proxies.
// Dials to port 1 are refused, so every route goes through a proxy.
type faultCluster struct {
	t     *testing.T
	bin   string
	dir   string
	lazy  bool
	nodes []*faultNode
	links [3][3]*linkProxy
	mon   *http.Client
}

// faultNode is one NATS node: its ports, its configuration file, its store
// on a powerfs mount and its current process (nil while down).
type faultNode struct {
	name                string
	client, route, http int
	conf                string
	backing, mnt        string
	fs                  *powerfs.FS
	logs                *queuetest.SyncBuffer
	cmd                 *exec.Cmd
	done                chan error
	paused              bool
	starts              int
}

// unreachableRoute is the route address every node advertises: nothing
// listens on port 1, so no implicit route bypasses the proxies.
const unreachableRoute = "127.0.0.1:1"

// startFaultCluster builds (or reuses) nats-server, mounts the stores,
// starts the proxies and the three nodes and waits for a meta leader.
// lazy drops `sync_interval: always` from the configurations (NATS's
// default: a sync every 2 minutes).
func startFaultCluster(t *testing.T, lazy bool) *faultCluster {
	t.Helper()
	if err := powerfs.Available(); err != nil {
		t.Skipf("the fault suite puts each NATS store on a power-loss file system, unavailable here: %v", err)
	}
	c := &faultCluster{t: t, bin: natsServerBinary(t), dir: t.TempDir(), lazy: lazy, mon: &http.Client{Timeout: 2 * time.Second}}
	ports := queuetest.FreePorts(t, 9)
	for i := range 3 {
		n := &faultNode{name: fmt.Sprintf("n%d", i+1), client: ports[3*i], route: ports[3*i+1], http: ports[3*i+2],
			backing: filepath.Join(c.dir, fmt.Sprintf("backing-n%d", i+1)), mnt: filepath.Join(c.dir, fmt.Sprintf("mnt-n%d", i+1)),
			logs: &queuetest.SyncBuffer{}}
		for _, d := range []string{n.backing, n.mnt} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		c.nodes = append(c.nodes, n)
	}
	// One cleanup that stops the processes before it unmounts their
	// stores; registered before anything that uses them.
	t.Cleanup(c.shutdown)
	for i := range c.nodes {
		for j, b := range c.nodes {
			if i != j {
				c.links[i][j] = startLinkProxy(t, fmt.Sprintf("127.0.0.1:%d", b.route))
			}
		}
	}
	for i, n := range c.nodes {
		n.conf = c.writeConfig(i)
		c.mount(n)
	}
	for _, n := range c.nodes {
		c.start(n)
	}
	if err := pollUntil(60*time.Second, c.metaLeader); err != nil {
		t.Fatalf("the NATS cluster has no meta leader: %v", err)
	}
	return c
}

// writeConfig writes node i's configuration: deploy/nats/n<i>.conf with
// free ports, the store on the mount, routes through the proxies, and
// without `sync_interval: always` when lazy. It parses the result as
// nats-server does to be sure the template still says what the suite
// relies on.
func (c *faultCluster) writeConfig(i int) string {
	t, n := c.t, c.nodes[i]
	b, err := os.ReadFile(filepath.Join(deployDir, fmt.Sprintf("n%d.conf", i+1)))
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for j := range c.nodes {
		if j != i {
			routes = append(routes, "nats://"+c.links[i][j].addr())
		}
	}
	conf := regexp.MustCompile(`routes: \[[^\]]*\]`).ReplaceAllLiteralString(string(b),
		fmt.Sprintf("routes: [%s]\n  advertise: %q", strings.Join(routes, ", "), unreachableRoute))
	store := filepath.Join(n.mnt, "js")
	conf = strings.NewReplacer(
		fmt.Sprintf("127.0.0.1:%d", 4222+i), fmt.Sprintf("127.0.0.1:%d", n.client),
		fmt.Sprintf("127.0.0.1:%d", 6232+i), fmt.Sprintf("127.0.0.1:%d", n.route),
		fmt.Sprintf("127.0.0.1:%d", 8222+i), fmt.Sprintf("127.0.0.1:%d", n.http),
		fmt.Sprintf(`"./js-n%d"`, i+1), strconv.Quote(store),
	).Replace(conf)
	if c.lazy {
		conf = regexp.MustCompile(`(?m)^\s*sync_interval: always\s*$`).ReplaceAllLiteralString(conf, "")
	}
	path := filepath.Join(c.dir, n.name+".conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if o.ServerName != n.name || o.Port != n.client || o.HTTPPort != n.http || o.Cluster.Port != n.route || len(o.Routes) != 2 ||
		o.Cluster.Advertise != unreachableRoute || o.StoreDir != store || o.SyncAlways == c.lazy || o.SystemAccount != "SYS" {
		t.Fatalf("deploy/nats/n%d.conf no longer has what the fault suite rewrites (ports, routes, store, sync_interval):\n%s", i+1, conf)
	}
	return path
}

func (c *faultCluster) mount(n *faultNode) {
	fs, err := powerfs.Mount(n.backing, n.mnt, powerfs.Options{Journaled: true})
	if err != nil {
		c.t.Fatalf("mount %s: %v", n.name, err)
	}
	n.fs = fs
}

// start starts node n's process on its configuration. The process's
// working directory is not on the mount (powerfs's caveat about forking
// into a mount).
func (c *faultCluster) start(n *faultNode) {
	n.starts++
	fmt.Fprintf(n.logs, "=== start %d of %s at %s ===\n", n.starts, n.name, time.Now().Format(time.TimeOnly))
	cmd := exec.Command(c.bin, "-c", n.conf)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = n.logs, n.logs
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", n.name, err)
	}
	n.cmd, n.done, n.paused = cmd, make(chan error, 1), false
	go func() { n.done <- cmd.Wait() }()
}

// kill ends node n with SIGKILL (also when paused) and waits for it.
func (c *faultCluster) kill(n *faultNode) {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		c.t.Fatalf("%s did not die after SIGKILL", n.name)
	}
	fmt.Fprintf(n.logs, "=== %s killed at %s ===\n", n.name, time.Now().Format(time.TimeOnly))
	n.cmd, n.paused = nil, false
}

func (c *faultCluster) pause(n *faultNode) {
	if err := n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP %s: %v", n.name, err)
	}
	n.paused = true
}

func (c *faultCluster) resume(n *faultNode) {
	if err := n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		c.t.Fatalf("SIGCONT %s: %v", n.name, err)
	}
	n.paused = false
}

// powerCut cuts the power of every node at once: each store's file
// system freezes (nothing more becomes durable, every operation fails),
// the processes are killed, and each store is reverted to what was
// fsynced, as after a reboot. The nodes are not restarted.
func (c *faultCluster) powerCut() []powerfs.RevertStats {
	for _, n := range c.nodes {
		n.fs.Cut()
	}
	for _, n := range c.nodes {
		c.kill(n)
	}
	var out []powerfs.RevertStats
	for _, n := range c.nodes {
		if err := n.fs.Unmount(); err != nil {
			c.t.Fatalf("unmount %s: %v", n.name, err)
		}
		rs, err := n.fs.Revert()
		if err != nil {
			c.t.Fatalf("revert %s: %v", n.name, err)
		}
		out = append(out, rs)
		c.mount(n)
	}
	return out
}

// partition sets the mode of every link to and from node i.
func (c *faultCluster) partition(i int, m linkMode) {
	for j := range c.nodes {
		if j != i {
			c.links[i][j].set(m)
			c.links[j][i].set(m)
		}
	}
}

func (c *faultCluster) healLinks() {
	for i := range c.nodes {
		for j := range c.nodes {
			if i != j {
				c.links[i][j].set(linkPass)
			}
		}
	}
}

func (c *faultCluster) shutdown() {
	for _, n := range c.nodes {
		if n.cmd != nil {
			_ = n.cmd.Process.Signal(syscall.SIGKILL)
			<-n.done
			n.cmd = nil
		}
	}
	for _, n := range c.nodes {
		if n.fs != nil {
			if err := n.fs.Unmount(); err != nil {
				c.t.Errorf("unmount %s: %v", n.name, err)
			}
		}
	}
	if c.t.Failed() {
		for _, n := range c.nodes {
			c.t.Logf("nats-server %s, last lines:\n%s", n.name, lastLines(n.logs.String(), 60))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *faultCluster) clientURLs(user, password string) string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", user, password, n.client))
	}
	return strings.Join(u, ",")
}

func (c *faultCluster) bookline() string { return c.clientURLs("bookline", "bookline-change-me") }

func (c *faultCluster) monitorURLs() string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, fmt.Sprintf("http://127.0.0.1:%d", n.http))
	}
	return strings.Join(u, ",")
}

func (c *faultCluster) node(name string) (int, *faultNode) {
	for i, n := range c.nodes {
		if n.name == name {
			return i, n
		}
	}
	return -1, nil
}

// get reads a monitoring endpoint of node n into v.
func (c *faultCluster) get(n *faultNode, path string, v any) error {
	resp, err := c.mon.Get(fmt.Sprintf("http://127.0.0.1:%d%s", n.http, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s %s: %d %s", n.name, path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

// live are the nodes running and not paused.
func (c *faultCluster) live() []*faultNode {
	var out []*faultNode
	for _, n := range c.nodes {
		if n.cmd != nil && !n.paused {
			out = append(out, n)
		}
	}
	return out
}

func (c *faultCluster) metaLeader() error {
	for _, n := range c.nodes {
		var v server.JSInfo
		if err := c.get(n, "/jsz", &v); err != nil {
			return err
		}
		if v.Meta == nil || v.Meta.Leader == "" {
			return fmt.Errorf("%s: no meta leader yet", n.name)
		}
	}
	return nil
}

// streamLeader is the leader of the command stream that at least two live
// nodes agree on ("" with the views when there is none).
func (c *faultCluster) streamLeader() (string, error) {
	votes := map[string]int{}
	var views []string
	for _, n := range c.live() {
		var v server.JSInfo
		if err := c.get(n, "/jsz?acc=BOOKLINE&streams=true", &v); err != nil {
			views = append(views, err.Error())
			continue
		}
		leader := ""
		for _, a := range v.AccountDetails {
			for _, s := range a.Streams {
				if s.Name == queue.StreamName && s.Cluster != nil {
					leader = s.Cluster.Leader
				}
			}
		}
		views = append(views, n.name+" sees "+strconv.Quote(leader))
		if leader != "" {
			votes[leader]++
		}
	}
	for name, v := range votes {
		if v >= 2 {
			return name, nil
		}
	}
	return "", fmt.Errorf("no leader of %s agreed by two nodes: %s", queue.StreamName, strings.Join(views, "; "))
}

// healthy is nil once every node runs and answers /healthz 200 (its
// JetStream assets current) and, with the stream, two agree on the
// stream's leader. Without the stream (a power cut of lazy servers may
// take it whole) a meta leader is enough: bookline creates it again.
func (c *faultCluster) healthy(stream bool) error {
	for _, n := range c.nodes {
		if n.cmd == nil || n.paused {
			return fmt.Errorf("%s is down or paused", n.name)
		}
		var v map[string]any
		if err := c.get(n, "/healthz", &v); err != nil {
			return err
		}
	}
	if !stream {
		return c.metaLeader()
	}
	_, err := c.streamLeader()
	return err
}

// stepDownTo asks the command stream's leader to hand over to node name
// (a placement preference, which the servers may not honour).
func (c *faultCluster) stepDownTo(name string) error {
	nc, err := nats.Connect(c.bookline(), nats.Timeout(2*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	req, _ := json.Marshal(map[string]any{"placement": map[string]any{"preferred": name}})
	resp, err := nc.Request(fmt.Sprintf("$JS.API.STREAM.LEADER.STEPDOWN.%s", queue.StreamName), req, 5*time.Second)
	if err != nil {
		return err
	}
	var r struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return err
	}
	if !r.Success {
		return fmt.Errorf("stepdown: %s", resp.Data)
	}
	return nil
}

// blockFiles are the command stream's message block files on node n.
func (c *faultCluster) blockFiles(n *faultNode) []string {
	files, _ := filepath.Glob(filepath.Join(n.mnt, "js", "jetstream", "BOOKLINE", "streams", queue.StreamName, "msgs", "*.blk"))
	var out []string
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.Size() > 0 {
			out = append(out, f)
		}
	}
	return out
}

// flipBit flips one bit of a random byte of a random block file of the
// stopped node n, through its mount (the kernel's page cache of the mount
// stays coherent), and says where.
func (c *faultCluster) flipBit(n *faultNode, rng *rand.Rand) string {
	files := c.blockFiles(n)
	if len(files) == 0 {
		c.t.Fatalf("%s has no block file of %s", n.name, queue.StreamName)
	}
	path := files[rng.IntN(len(files))]
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	off := rng.Int64N(st.Size())
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		c.t.Fatal(err)
	}
	bit := rng.IntN(8)
	b[0] ^= 1 << bit
	if _, err := f.WriteAt(b, off); err != nil {
		c.t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		c.t.Fatal(err)
	}
	return fmt.Sprintf("%s: bit %d of byte %d of %s (%d bytes)", n.name, bit, off, filepath.Base(path), st.Size())
}

// truncateBlock cuts a random block file of the stopped node n at a random
// length and says where.
func (c *faultCluster) truncateBlock(n *faultNode, rng *rand.Rand) string {
	files := c.blockFiles(n)
	if len(files) == 0 {
		c.t.Fatalf("%s has no block file of %s", n.name, queue.StreamName)
	}
	path := files[rng.IntN(len(files))]
	st, err := os.Stat(path)
	if err != nil {
		c.t.Fatal(err)
	}
	size := rng.Int64N(st.Size())
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		c.t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		c.t.Fatal(err)
	}
	return fmt.Sprintf("%s: %s truncated from %d to %d bytes", n.name, filepath.Base(path), st.Size(), size)
}

// pollUntil calls fn until it returns nil or timeout passes, and returns
// its last error then; callers decide whether that fails the test.
func pollUntil(timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	wait := 10 * time.Millisecond
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, 250*time.Millisecond)
	}
}
