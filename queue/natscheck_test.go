package queue_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestCheckServersSyncAlways reads the settings of a 3-node cluster whose
// servers sync before they acknowledge, both ways: from the monitoring
// endpoints and over the system account. Every server is found, none is
// lazy, and the cluster's size is 3.
func TestCheckServersSyncAlways(t *testing.T) {
	c := queuetest.StartClusterWith(t, 3, queuetest.ClusterOptions{SyncAlways: true, SystemUser: "sys", SystemPassword: "pw"})
	for name, check := range map[string]queue.ServerCheck{
		"monitor": {MonitorURLs: c.MonitorURLs()},
		"system":  {SystemURL: c.SystemURL("sys", "pw")},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		began := time.Now()
		r, err := queue.CheckServers(ctx, check)
		cancel()
		t.Logf("%s: %s", name, time.Since(began).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := strings.Join(r.Names(), ","); got != "n0,n1,n2" || r.Size != 3 || len(r.Lazy()) != 0 {
			t.Errorf("%s: servers %s, size %d, lazy %v", name, got, r.Size, r.Lazy())
		}
	}
}

// TestClusterRefusesLazyServers starts an instance on servers with NATS's
// default sync schedule: it is refused, naming every server and the
// setting to change; with AllowLazySync it starts and reports the
// servers as lazy.
func TestClusterRefusesLazyServers(t *testing.T) {
	t.Parallel()
	c := queuetest.StartCluster(t, 3)
	cfg := queue.NodeConfig{DataDir: t.TempDir(), NATSURL: c.URLs(), InstanceID: "lazy", Partitions: 2,
		Servers: queue.ServerCheck{MonitorURLs: c.MonitorURLs()}, Logger: quietLog()}
	_, err := queue.StartNode(cfg)
	if !errors.Is(err, queue.ErrLazyNATSSync) {
		t.Fatalf("start on lazy servers: %v, want ErrLazyNATSSync", err)
	}
	for _, want := range []string{"n0 (sync_interval 2m0s)", "n1", "n2", "sync_interval: always", "--allow-lazy-nats-sync"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}

	logs := &queuetest.SyncBuffer{}
	cfg.AllowLazySync, cfg.Logger = true, slogTo(logs)
	n, err := queue.StartNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopNode(t, n) })
	lazy, detail := n.NATSDurability()
	if !lazy || !strings.Contains(detail, "LAZY") || !strings.Contains(detail, "n1 (sync_interval 2m0s)") {
		t.Errorf("durability %v %q", lazy, detail)
	}
	if !strings.Contains(logs.String(), "level=ERROR msg=\"LAZY NATS SYNC") {
		t.Errorf("no loud warning in the log:\n%s", logs)
	}
	if n.Replicas() != 3 {
		t.Errorf("replicas %d, want min(3, servers) = 3", n.Replicas())
	}
}

// TestClusterNeedsAServerCheck: without a way to read the servers'
// settings, cluster mode refuses to start, naming the flags; allowed to
// run lazily, it still needs the replicas to be given, since it cannot
// count the servers.
func TestClusterNeedsAServerCheck(t *testing.T) {
	t.Parallel()
	url := queuetest.StartServer(t)
	cfg := queue.NodeConfig{DataDir: t.TempDir(), NATSURL: url, InstanceID: "blind", Partitions: 2, Logger: quietLog()}
	_, err := queue.StartNode(cfg)
	if !errors.Is(err, queue.ErrNoServerCheck) {
		t.Fatalf("start without a check: %v", err)
	}
	for _, want := range []string{"--nats-monitor-urls", "--nats-system-creds", "--allow-lazy-nats-sync"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %s: %v", want, err)
		}
	}
	cfg.AllowLazySync = true
	if _, err = queue.StartNode(cfg); err == nil || !strings.Contains(err.Error(), "--replicas") {
		t.Fatalf("lazy start without replicas: %v", err)
	}
	cfg.Replicas = 1
	n, err := queue.StartNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, n)
	if lazy, detail := n.NATSDurability(); !lazy || !strings.HasPrefix(detail, "UNCHECKED") {
		t.Errorf("durability %v %q", lazy, detail)
	}
}

// TestCheckServersNamesTheMissing: a server whose monitoring URL is not
// given, and a server that is down, are named by the refusal.
func TestCheckServersNamesTheMissing(t *testing.T) {
	c := queuetest.StartClusterWith(t, 3, queuetest.ClusterOptions{SyncAlways: true})
	urls := c.MonitorURLs()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := queue.CheckServers(ctx, queue.ServerCheck{MonitorURLs: urls[:2]})
	cancel()
	if !errors.Is(err, queue.ErrServersUnchecked) || !strings.Contains(err.Error(), "server n2 did not answer") {
		t.Fatalf("two of three URLs: %v", err)
	}
	c.Stop(1)
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	_, err = queue.CheckServers(ctx, queue.ServerCheck{MonitorURLs: urls})
	cancel()
	if !errors.Is(err, queue.ErrServersUnchecked) || !strings.Contains(err.Error(), "server n1 did not answer") ||
		!strings.Contains(err.Error(), urls[1]) {
		t.Fatalf("a server down: %v", err)
	}
	// The node says the same, and that the check can be skipped.
	_, err = queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), NATSURL: c.URLs(), InstanceID: "x", Partitions: 2,
		Servers: queue.ServerCheck{MonitorURLs: urls, Wait: time.Second}, Logger: quietLog()})
	if err == nil || !strings.Contains(err.Error(), "n1 did not answer") || !strings.Contains(err.Error(), "--allow-lazy-nats-sync") {
		t.Fatalf("start with a server down: %v", err)
	}
}

// TestClusterRefusesFewerReplicas: a stream an earlier start created with
// one replica is refused when three are asked (the default on three
// servers), naming the stream and how to raise it; allowed, the start
// goes on and leaves the stream as it is. Never changed either way.
func TestClusterRefusesFewerReplicas(t *testing.T) {
	t.Parallel()
	c := queuetest.StartClusterWith(t, 3, queuetest.ClusterOptions{SyncAlways: true})
	check := queue.ServerCheck{MonitorURLs: c.MonitorURLs()}
	old, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), NATSURL: c.URLs(), InstanceID: "old", Partitions: 2,
		Replicas: 1, Servers: check, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	stopNode(t, old)
	cfg := queue.NodeConfig{DataDir: t.TempDir(), NATSURL: c.URLs(), InstanceID: "new", Servers: check, Logger: quietLog()}
	_, err = queue.StartNode(cfg)
	if !errors.Is(err, queue.ErrFewerReplicas) {
		t.Fatalf("start on an R1 stream: %v, want ErrFewerReplicas", err)
	}
	for _, want := range []string{"stream BOOKLINE_CMD has 1, 3 asked", "nats stream edit BOOKLINE_CMD --replicas 3", "--allow-fewer-replicas"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	cfg.AllowFewerReplicas = true
	n, err := queue.StartNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, n)
	for _, name := range []string{queue.StreamName, queue.EventStreamName, "KV_" + queue.MembersBucket} {
		s, err := n.JetStream().Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 1 {
			t.Errorf("%s has %d replicas: changed", name, r)
		}
	}
	// A bucket of another component gets the replicas asked.
	ctx := context.Background()
	if _, err := n.EnsureKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "other", Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if s, err := n.JetStream().Stream(ctx, "KV_other"); err != nil || s.CachedInfo().Config.Replicas != 3 {
		t.Errorf("bucket other: %v, want 3 replicas", err)
	}
}

// TestCheckServersReadsSettingsFromJsz: nats-server fills jetstream.config
// in its /varz only at the endpoint's first request, so a server asked
// before its JetStream started (by a monitoring agent polling from boot)
// never shows it there until it restarts; the real binary did so in 3 of
// 12 starts of deploy/nats polled from boot. The check reads the settings
// and the meta group from /jsz, which reads them at every request. This
// endpoint answers as such a server does.
func TestCheckServersReadsSettingsFromJsz(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/varz":
			fmt.Fprint(w, `{"server_id":"NID","server_name":"solo","jetstream":{}}`)
		case "/jsz":
			fmt.Fprint(w, `{"server_id":"NID","config":{"max_memory":1,"sync_interval":120000000000,"sync_always":true}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := queue.CheckServers(ctx, queue.ServerCheck{MonitorURLs: []string{srv.URL}})
	if err != nil || strings.Join(r.Names(), ",") != "solo" || r.Size != 1 || len(r.Lazy()) != 0 {
		t.Fatalf("report %+v, err %v", r, err)
	}
}
