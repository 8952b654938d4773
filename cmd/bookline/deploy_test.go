package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// deployDir holds the NATS configuration the README's cluster section
// starts from.
const deployDir = "../../deploy/nats"

// TestDeployNATSConfigsParse reads deploy/nats as nats-server does: three
// servers of one cluster that sync before they acknowledge, with
// monitoring ports and a system account user, on the loopback ports the
// README uses.
func TestDeployNATSConfigsParse(t *testing.T) {
	for i := 1; i <= 3; i++ {
		o, err := server.ProcessConfigFile(filepath.Join(deployDir, fmt.Sprintf("n%d.conf", i)))
		if err != nil {
			t.Fatalf("n%d.conf: %v", i, err)
		}
		got := fmt.Sprintf("%s %s:%d http %d js %v sync_always %v cluster %s:%d routes %d system %s users %d",
			o.ServerName, o.Host, o.Port, o.HTTPPort, o.JetStream, o.SyncAlways, o.Cluster.Name, o.Cluster.Port,
			len(o.Routes), o.SystemAccount, len(o.Users))
		want := fmt.Sprintf("n%d 127.0.0.1:%d http %d js true sync_always true cluster bookline:%d routes 3 system SYS users 2",
			i, 4221+i, 8221+i, 6231+i)
		if got != want {
			t.Errorf("n%d.conf:\n got %s\nwant %s", i, got, want)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "deploy/nats/n1.conf") {
		t.Error("the README's cluster section does not start from deploy/nats")
	}
}

// TestDeployNATSClusterAcceptedOrRefused starts three real nats-server
// processes (built from the module in go.sum) from deploy/nats, on free
// ports: bookline starts on them, checking the servers through their
// monitoring ports or through the system account user, with 3 replicas by
// default, and /readyz and /metrics say the servers sync. The same
// configurations without `sync_interval: always` are refused, the refusal
// naming every server and the setting; --allow-lazy-nats-sync starts on
// them and says so in /readyz and bookline_nats_lazy_sync.
func TestDeployNATSClusterAcceptedOrRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nats-server and starts processes")
	}
	bin := natsServerBinary(t)
	key := filepath.Join(t.TempDir(), "secrets.key")
	if code, _, errs := runMain("secrets-key", "--out", key); code != 0 {
		t.Fatalf("secrets-key: %s", errs)
	}
	serve := func(dc *deployCluster, id string, extra ...string) []string {
		return append([]string{"serve", "--nats-url", dc.clientURLs("bookline", "bookline-change-me"), "--instance-id", id,
			"--secrets-key-file", key, "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--partitions", "2"}, extra...)
	}

	safe := startDeployCluster(t, bin, true)
	a := startProc(t, serve(safe, "a", "--nats-monitor-urls", strings.Join(safe.monitor, ","))...)
	b := startProc(t, serve(safe, "b", "--nats-system-url", safe.clientURLs("sys", "sys-change-me"))...)
	for _, p := range []*proc{a, b} {
		expectDurability(t, p, false, "every NATS server syncs before it acknowledges (sync_interval: always): n1, n2, n3")
	}
	nc, err := nats.Connect(safe.clientURLs("bookline", "bookline-change-me"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for _, name := range []string{queue.StreamName, queue.EventStreamName, "KV_" + queue.MembersBucket, "KV_BOOKLINE_WEBHOOKS"} {
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("%s: %d replicas, want 3 (the default on 3 servers)", name, r)
		}
	}

	lazy := startDeployCluster(t, bin, false)
	errs, err := runProc(serve(lazy, "c", "--nats-monitor-urls", strings.Join(lazy.monitor, ","))...)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(errs, "bookline serve: queue: NATS servers acknowledge before they sync: ") {
		t.Fatalf("bookline on servers without sync_interval: always: %v, want it to refuse to start:\n%s", err, errs)
	}
	for _, want := range []string{"n1 (sync_interval 2m0s)", "n2 (sync_interval 2m0s)", "n3 (sync_interval 2m0s)",
		"`jetstream { sync_interval: always }`", "--allow-lazy-nats-sync"} {
		if !strings.Contains(errs, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, errs)
		}
	}
	c := startProc(t, serve(lazy, "c", "--nats-monitor-urls", strings.Join(lazy.monitor, ","), "--allow-lazy-nats-sync")...)
	expectDurability(t, c, true, "LAZY (--allow-lazy-nats-sync): n1 (sync_interval 2m0s), n2 (sync_interval 2m0s), n3")
	if !strings.Contains(c.output(), "level=ERROR msg=\"LAZY NATS SYNC") {
		t.Errorf("no loud warning at start:\n%s", c.output())
	}
}

// expectDurability checks /readyz (200, with the durability detail) and
// bookline_nats_lazy_sync.
func expectDurability(t *testing.T, p *proc, lazy bool, detail string) {
	t.Helper()
	code, body := readyz(p.URL)
	var r struct {
		Checks map[string]string `json:"checks"`
	}
	if err := json.Unmarshal([]byte(body), &r); code != 200 || err != nil || !strings.Contains(r.Checks["nats_durability"], detail) {
		t.Errorf("/readyz %d %s: want 200 with nats_durability %q", code, body, detail)
	}
	want := 0.0
	if lazy {
		want = 1
	}
	if got := metricSum(t, p.URL, "bookline_nats_lazy_sync"); got != want {
		t.Errorf("bookline_nats_lazy_sync %v, want %v", got, want)
	}
}

// deployCluster is three nats-server processes started from deploy/nats.
type deployCluster struct {
	client, monitor []string // host:port, http://host:port
}

func (dc *deployCluster) clientURLs(user, password string) string {
	var u []string
	for _, c := range dc.client {
		u = append(u, fmt.Sprintf("nats://%s:%s@%s", user, password, c))
	}
	return strings.Join(u, ",")
}

// startDeployCluster starts deploy/nats's three servers with free ports
// instead of the fixed ones, their stores in a temporary directory, and
// without `sync_interval: always` unless syncAlways; it returns once they
// have a meta leader.
func startDeployCluster(t *testing.T, bin string, syncAlways bool) *deployCluster {
	t.Helper()
	dir := t.TempDir()
	free := queuetest.FreePorts(t, 9)
	var replace []string
	for i := 0; i < 3; i++ {
		for j, base := range []int{4222, 6232, 8222} {
			replace = append(replace, fmt.Sprintf("127.0.0.1:%d", base+i), fmt.Sprintf("127.0.0.1:%d", free[3*i+j]))
		}
		replace = append(replace, fmt.Sprintf(`"./js-n%d"`, i+1), fmt.Sprintf("%q", filepath.Join(dir, fmt.Sprintf("js-n%d", i+1))))
	}
	if !syncAlways {
		replace = append(replace, "sync_interval: always", "")
	}
	dc := &deployCluster{}
	for i := 1; i <= 3; i++ {
		b, err := os.ReadFile(filepath.Join(deployDir, fmt.Sprintf("n%d.conf", i)))
		if err != nil {
			t.Fatal(err)
		}
		conf := strings.NewReplacer(replace...).Replace(string(b))
		if syncAlways != strings.Contains(conf, "sync_interval: always") || fixedPort.MatchString(conf) {
			t.Fatalf("n%d.conf was not rewritten as expected:\n%s", i, conf)
		}
		path := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-c", path)
		cmd.Dir = dir
		logs := &queuetest.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("nats-server n%d:\n%s", i, logs)
			}
		})
		dc.client = append(dc.client, fmt.Sprintf("127.0.0.1:%d", free[3*(i-1)]))
		dc.monitor = append(dc.monitor, fmt.Sprintf("http://127.0.0.1:%d", free[3*(i-1)+2]))
	}
	queuetest.CheckFor(t, 30*time.Second, func() error {
		for _, m := range dc.monitor {
			resp, err := http.Get(m + "/varz")
			if err != nil {
				return err
			}
			var v struct {
				JetStream struct {
					Meta *struct {
						Leader string `json:"leader"`
					} `json:"meta"`
				} `json:"jetstream"`
			}
			err = json.NewDecoder(resp.Body).Decode(&v)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if v.JetStream.Meta == nil || v.JetStream.Meta.Leader == "" {
				return fmt.Errorf("%s: no meta leader yet", m)
			}
		}
		return nil
	})
	return dc
}

// fixedPort matches the ports of deploy/nats, which a test must not use.
var fixedPort = regexp.MustCompile(`127\.0\.0\.1:(422[234]|623[234]|822[234])\b`)

// The nats-server binary is built from the module version in go.sum, once:
// it is kept under os.TempDir, named by that version, the Go version and
// the platform, so that later test runs reuse it.
var (
	natsServerOnce sync.Once
	natsServerPath string
	natsServerErr  error
)

func natsServerBinary(t *testing.T) string {
	t.Helper()
	natsServerOnce.Do(func() {
		version := ""
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, m := range bi.Deps {
				if m.Path == "github.com/nats-io/nats-server/v2" && m.Replace == nil {
					version = m.Version
				}
			}
		}
		dir := ""
		if version != "" {
			dir = filepath.Join(os.TempDir(), fmt.Sprintf("bookline-nats-server-%s-%s-%s_%s", version, runtime.Version(), runtime.GOOS, runtime.GOARCH))
			natsServerPath = filepath.Join(dir, "nats-server")
			if st, err := os.Stat(natsServerPath); err == nil && st.Mode().IsRegular() {
				return
			}
			if natsServerErr = os.MkdirAll(dir, 0o755); natsServerErr != nil {
				return
			}
		} else if dir, natsServerErr = os.MkdirTemp("", "bookline-nats-server-"); natsServerErr != nil {
			// A replaced or unversioned module: build it for this run.
			return
		}
		natsServerPath = filepath.Join(dir, "nats-server")
		// Built beside its final name and renamed, so that a concurrent
		// run never starts a half-written binary.
		tmp := fmt.Sprintf("%s.%d.tmp", natsServerPath, os.Getpid())
		cmd := exec.Command("go", "build", "-o", tmp, "github.com/nats-io/nats-server/v2")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			natsServerErr = fmt.Errorf("go build nats-server: %v\n%s", err, out)
			return
		}
		natsServerErr = os.Rename(tmp, natsServerPath)
	})
	if natsServerErr != nil {
		t.Fatal(natsServerErr)
	}
	return natsServerPath
}
