package queuetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a JetStream cluster of in-process servers on loopback.
type Cluster struct {
	Servers []*server.Server
	opts    []*server.Options
}

// FreePorts picks n free loopback ports. Routes must be configured before
// the servers start (JetStream clustering needs configured routes), and a
// node killed by a test restarts on its own ports, so the ports are picked
// up front and must stay free while nobody listens on them. Ports that
// the kernel hands out for ":0" listeners and outgoing connections (the
// ephemeral range) would not: the other test processes running at the
// same time take them all the time, and a server then fails with "address
// already in use". So they are chosen at random below that range, where
// only other callers of FreePorts pick, and probed by listening. Another
// process may still take one between the probe and the server's bind,
// which StartClusterWith notices and retries.
func FreePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	low, high := belowEphemeral()
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if high > low && tries < 100*n {
			addr = fmt.Sprintf("127.0.0.1:%d", low+rand.IntN(high-low))
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				tb.Fatal(err)
			}
			continue // taken: try another
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// belowEphemeral is the range of ports [low, high) that FreePorts picks
// from: from 10000 to the start of the kernel's ephemeral range (Linux's
// net.ipv4.ip_local_port_range, 32768 by default). It is empty when that
// range cannot be read or starts too low.
func belowEphemeral() (low, high int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	start, err := strconv.Atoi(f[0])
	if err != nil || start < 11000 {
		return 0, 0
	}
	return 10000, start
}

// ReadyTimeout bounds how long StartCluster and StartServer wait for the
// servers to listen and for a JetStream cluster to form, and how long
// tests wait for a node to be ready (caught up). It is generous because
// it only matters when something is broken: the waits return as soon as
// the condition holds, and with the race detector on a loaded 2-core
// machine starting three clustered servers has taken longer than 20 s,
// and an instance joining a cluster under load 15 s per partition.
const ReadyTimeout = 60 * time.Second

// startAttempts is how often StartCluster picks new cluster ports when a
// server could not listen on its own (another process took it between
// freePorts and the listen).
const startAttempts = 3

// ClusterOptions are the settings of StartClusterWith.
type ClusterOptions struct {
	// SyncAlways makes every server fsync each write before it
	// acknowledges it (sync_interval: always), as bookline requires of
	// a cluster unless told otherwise. Tests about durability set it;
	// it costs an fsync per message.
	SyncAlways bool
	// NoWait returns as soon as the servers accept connections, without
	// waiting for the JetStream cluster to elect its meta leader (for
	// tests of what happens while it settles).
	NoWait bool
	// SystemUser, when set, gives the servers two accounts: SYS, the
	// system account, with this user (password SystemPassword), and
	// BOOKLINE with JetStream, which connections without credentials
	// use. Then the servers answer $SYS.REQ.SERVER.PING.VARZ to that
	// user (queue.ServerCheck.SystemURL: SystemURL).
	SystemUser, SystemPassword string
}

// StartCluster starts n JetStream servers (client ports chosen by the
// system, one store directory each, full-mesh routes, a monitoring port
// each) and waits until an R-n stream can be created. They are shut down
// at cleanup. Their JetStream keeps NATS's default sync schedule: nodes of
// bookline on it must allow that (queue.NodeConfig.AllowLazySync) or use
// StartClusterWith and SyncAlways.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	return StartClusterWith(tb, n, ClusterOptions{})
}

// StartClusterWith is StartCluster with options.
func StartClusterWith(tb testing.TB, n int, co ClusterOptions) *Cluster {
	tb.Helper()
	for attempt := 1; ; attempt++ {
		c, err := startCluster(tb, FreePorts(tb, n), co)
		if err == nil {
			if !co.NoWait {
				c.waitJetStream(tb, n)
			}
			return c
		}
		c.Shutdown()
		if !errors.Is(err, errPortTaken) || attempt == startAttempts {
			tb.Fatal(err)
		}
		tb.Logf("starting the cluster again on other ports: %v", err)
	}
}

// errPortTaken: a server could not listen on its cluster port.
var errPortTaken = errors.New("cluster port taken")

// startCluster starts one server per cluster port and waits until each
// listens.
func startCluster(tb testing.TB, ports []int, co ClusterOptions) (*Cluster, error) {
	tb.Helper()
	n := len(ports)
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	c := &Cluster{}
	var logs []*fatalLog
	for i := 0; i < n; i++ {
		o := accountOptions(tb, co)
		*o = server.Options{
			Accounts: o.Accounts, SystemAccount: o.SystemAccount, Users: o.Users, NoAuthUser: o.NoAuthUser,
			ServerName: fmt.Sprintf("n%d", i),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   tb.TempDir(),
			NoSigs:     true,
			NoLog:      true,
			MaxPayload: 1 << 20,
			Cluster:    server.ClusterOpts{Name: "bookline-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:     routes,
			HTTPHost:   "127.0.0.1",
			HTTPPort:   -1, // a free port: MonitorURLs
			SyncAlways: co.SyncAlways,
		}
		ns, err := server.NewServer(o)
		if err != nil {
			return c, err
		}
		log := &fatalLog{}
		ns.SetLogger(log, false, false)
		go ns.Start()
		c.Servers = append(c.Servers, ns)
		c.opts = append(c.opts, o)
		logs = append(logs, log)
	}
	tb.Cleanup(c.Shutdown)
	deadline := time.Now().Add(ReadyTimeout)
	for i, ns := range c.Servers {
		// Short looks, so that a server that failed to listen is
		// noticed at once rather than at the deadline.
		for !ns.ReadyForConnections(250 * time.Millisecond) {
			if msg := logs[i].first(); msg != "" {
				if strings.Contains(msg, "listening on router") {
					return c, fmt.Errorf("%w: nats %s: %s", errPortTaken, ns.Name(), msg)
				}
				return c, fmt.Errorf("nats %s failed: %s", ns.Name(), msg)
			}
			if time.Now().After(deadline) {
				return c, fmt.Errorf("nats %s not ready after %s", ns.Name(), ReadyTimeout)
			}
		}
	}
	return c, nil
}

// MonitorURLs are the monitoring endpoints of the running servers
// (queue.ServerCheck.MonitorURLs).
func (c *Cluster) MonitorURLs() []string {
	var u []string
	for _, ns := range c.Servers {
		if ns.Running() && ns.MonitorAddr() != nil {
			u = append(u, "http://"+ns.MonitorAddr().String())
		}
	}
	return u
}

// accountOptions are the accounts of co.SystemUser (none without it),
// read from a configuration file: only a configuration enables JetStream
// for an account before the server starts.
func accountOptions(tb testing.TB, co ClusterOptions) *server.Options {
	tb.Helper()
	if co.SystemUser == "" {
		return &server.Options{}
	}
	conf := filepath.Join(tb.TempDir(), "accounts.conf")
	text := fmt.Sprintf(`accounts {
  BOOKLINE { jetstream: enabled, users: [{user: bookline, password: bookline}] }
  SYS { users: [{user: %q, password: %q}] }
}
system_account: SYS
no_auth_user: bookline
`, co.SystemUser, co.SystemPassword)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		tb.Fatal(err)
	}
	o, err := server.ProcessConfigFile(conf)
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

// SystemURL is URLs with the system account user of
// ClusterOptions.SystemUser.
func (c *Cluster) SystemURL(user, password string) string {
	var u []string
	for _, ns := range c.Servers {
		if ns.Running() {
			u = append(u, strings.Replace(ns.ClientURL(), "nats://", "nats://"+url.UserPassword(user, password).String()+"@", 1))
		}
	}
	return strings.Join(u, ",")
}

// fatalLog keeps what a server reports as fatal: with logging off a server
// that cannot listen on its cluster port just runs on without routes.
type fatalLog struct {
	mu    sync.Mutex
	fatal []string
}

func (l *fatalLog) Fatalf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fatal = append(l.fatal, fmt.Sprintf(format, v...))
}

func (l *fatalLog) first() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.fatal) == 0 {
		return ""
	}
	return l.fatal[0]
}

func (*fatalLog) Noticef(string, ...any) {}
func (*fatalLog) Warnf(string, ...any)   {}
func (*fatalLog) Errorf(string, ...any)  {}
func (*fatalLog) Debugf(string, ...any)  {}
func (*fatalLog) Tracef(string, ...any)  {}

// waitJetStream polls until a stream with n replicas can be created.
func (c *Cluster) waitJetStream(tb testing.TB, replicas int) {
	tb.Helper()
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		tb.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(ReadyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "QUEUETEST_READY", Subjects: []string{"queuetest.ready"}, Replicas: replicas, Storage: jetstream.MemoryStorage})
		if err == nil {
			err = js.DeleteStream(ctx, "QUEUETEST_READY")
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("jetstream cluster not ready after %s: %v", ReadyTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// URLs is the comma-separated client URLs of the running servers.
func (c *Cluster) URLs() string {
	var u []string
	for _, ns := range c.Servers {
		if ns.Running() {
			u = append(u, ns.ClientURL())
		}
	}
	return strings.Join(u, ",")
}

// Stop shuts server i down (a NATS node failing).
func (c *Cluster) Stop(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}

// Shutdown stops every server.
func (c *Cluster) Shutdown() {
	for _, ns := range c.Servers {
		ns.Shutdown()
	}
	for _, ns := range c.Servers {
		ns.WaitForShutdown()
	}
}

// StartServer starts one standalone JetStream server on a loopback port
// and returns its client URL; it is shut down at cleanup.
func StartServer(tb testing.TB) string {
	tb.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: tb.TempDir(), NoSigs: true, NoLog: true, MaxPayload: 1 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	go ns.Start()
	tb.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(ReadyTimeout) {
		tb.Fatal("nats not ready")
	}
	return ns.ClientURL()
}
