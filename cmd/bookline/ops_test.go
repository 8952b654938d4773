package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

func TestServeRefusesOpenNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		dir := t.TempDir()
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"serve", "--data-dir", dir, "--http-addr", addr, "--nats-listen", ""}, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), "refusing to serve the API open on a non-loopback address") {
			t.Fatalf("%s: exit %d, stderr:\n%s", addr, code, errb.String())
		}
		if strings.Contains(errb.String(), "http listening") {
			t.Fatalf("%s: listened before refusing:\n%s", addr, errb.String())
		}
		if _, err := os.Stat(queue.IndexFile(dir)); err == nil {
			t.Fatalf("%s: the index was opened before refusing", addr)
		}
	}
}

func TestServeFlagErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(cfg, []byte(`{"http-addr":"127.0.0.1:0","no-such-flag":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(dir, "keys.json")
	if err := os.WriteFile(keys, []byte(`[{"name":"a","role":"root","sha256":"`+httpapi.HashKey("x")+`"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", cfg}, `unknown key "no-such-flag"`},
		{[]string{"--config", filepath.Join(dir, "missing.json")}, "config file"},
		{[]string{"--api-keys-file", keys}, "role must be"},
		{[]string{"--api-keys", "not json"}, "--api-keys"},
		{[]string{"--nats-creds", keys}, "give --nats-url"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--nats-tls-cert", keys}, "go together"},
		{[]string{"--http-write-timeout", "1s"}, "must exceed --reply-timeout"},
		{[]string{"--max-header-bytes", "10"}, "--max-header-bytes"},
		{[]string{"--rate-limit", "-1"}, "--rate-limit"},
		{[]string{"--trusted-proxies", "10.0.0.0/8, 10.0.0.0/33"}, `--trusted-proxies: trusted proxy "10.0.0.0/33"`},
		{[]string{"--trusted-proxies", "proxy.example"}, "not an IP address or CIDR prefix"},
		{[]string{"--keyless-record-retention", "30s"}, "--keyless-record-retention 30s: want 0 (forever) or from 1m"},
		{[]string{"--keyed-record-retention", "-1h"}, "--keyed-record-retention"},
		{[]string{"--keyed-record-retention", "100000h"}, "--keyed-record-retention"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"serve", "--data-dir", filepath.Join(dir, "d"), "--nats-listen", ""}, tc.args...)
		if code := Main(context.Background(), args, &out, &errb); code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, want an error with %q:\n%s", tc.args, code, tc.want, errb.String())
		}
	}
	// The retentions can come from the environment like every flag.
	t.Setenv("BOOKLINE_KEYED_RECORD_RETENTION", "5s")
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"serve", "--data-dir", filepath.Join(dir, "d"), "--nats-listen", ""}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "--keyed-record-retention 5s") {
		t.Errorf("BOOKLINE_KEYED_RECORD_RETENTION=5s: exit %d:\n%s", code, errb.String())
	}
}

// TestConfigPrecedence: flag > environment > config file > default, and
// the config file may be named in the environment.
func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.json")
	if err := os.WriteFile(cfg, []byte(`{"a":"file-a","b":"file-b","c":"file-c","n":7,"on":true,"d":"3s"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	newFS := func() (*flag.FlagSet, map[string]*string, *int, *bool, *time.Duration) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		v := map[string]*string{}
		for _, n := range []string{"a", "b", "c", "e", "config"} {
			v[n] = fs.String(n, "default-"+n, "")
		}
		return fs, v, fs.Int("n", 1, ""), fs.Bool("on", false, ""), fs.Duration("d", time.Second, "")
	}
	t.Setenv("BOOKLINE_B", "env-b")
	t.Setenv("BOOKLINE_A", "env-a")
	fs, v, n, on, d := newFS()
	if err := parseFlagsWithConfig(fs, []string{"--a", "flag-a", "--config", cfg}, "config"); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(*v["a"], *v["b"], *v["c"], *v["e"], *n, *on, *d)
	if want := fmt.Sprint("flag-a", "env-b", "file-c", "default-e", 7, true, 3*time.Second); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	t.Setenv("BOOKLINE_CONFIG", cfg)
	fs, v, _, _, _ = newFS()
	if err := parseFlagsWithConfig(fs, nil, "config"); err != nil {
		t.Fatal(err)
	}
	if *v["a"] != "env-a" || *v["c"] != "file-c" {
		t.Fatalf("config from the environment: a=%s c=%s", *v["a"], *v["c"])
	}
	for body, want := range map[string]string{
		`{"zzz":"1"}`:         "unknown key",
		`{"config":"x"}`:      "unknown key",
		`{"a":["x"]}`:         "want a string, number or boolean",
		`{"n":"seven"}`:       `"n"`,
		`[1]`:                 "JSON object",
		`{"a":"x"} {"b":"y"}`: "trailing data",
	} {
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		fs, _, _, _, _ = newFS()
		if err := parseFlagsWithConfig(fs, nil, "config"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", body, err, want)
		}
	}
}

func TestServeHelpListsOperationsFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"serve", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"--config", "BOOKLINE_CONFIG", "--api-keys-file", "BOOKLINE_API_KEYS", "--nats-creds", "--nats-nkey",
		"--nats-tls-ca", "--nats-tls-cert", "--nats-tls-key", "--max-body-bytes", "--max-header-bytes", "--max-list-range", "--max-list-limit",
		"--rate-limit", "--rate-burst", "--page-rate-limit", "--page-rate-burst", "--http-read-timeout", "--http-write-timeout", "--http-idle-timeout", "--shutdown-timeout",
		"--shutdown-delay", "--pprof-addr", "--log-every-booking", "--event-batches", "BOOKLINE_EVENT_BATCHES", "command line > environment"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("help lacks %s", want)
		}
	}
}

func TestHashKey(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"hash-key", "--new"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	m := regexp.MustCompile(`key:\s+(\S+)\nsha256: ([0-9a-f]{64})\n`).FindStringSubmatch(out.String())
	if m == nil || httpapi.HashKey(m[1]) != m[2] {
		t.Fatalf("output %q", out.String())
	}
}

func httpDo(t *testing.T, method, url, key, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestServeWithKeysMetricsPprof runs the binary with keys from a config
// file, pprof on, debug logs: auth works end to end, /metrics and pprof
// answer, verify works with an admin key, and no key is ever logged.
func TestServeWithKeysMetricsPprof(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	const admin, booker = "bk_test_admin_key_0123456789", "bk_test_booker_key_0123456789"
	keys := fmt.Sprintf(`[{"name":"ops","role":"admin","sha256":%q},{"name":"web","role":"booker","sha256":%q,"calendars":["p1"]}]`,
		httpapi.HashKey(admin), httpapi.HashKey(booker))
	keysFile := filepath.Join(dir, "keys.json")
	cfgFile := filepath.Join(dir, "bookline.json")
	if err := os.WriteFile(keysFile, []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"api-keys-file": keysFile, "pprof-addr": "127.0.0.1:0", "log-level": "debug", "partitions": 2})
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "serve", "--config", cfgFile, "--data-dir", filepath.Join(dir, "data"), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0")
	if st, b := httpDo(t, "PUT", p.URL+"/v1/calendars/p1", "", `{}`); st != 401 || !strings.Contains(string(b), "unauthorized") {
		t.Fatalf("no key: %d %s", st, b)
	}
	if st, _ := httpDo(t, "PUT", p.URL+"/v1/calendars/p1", booker, `{}`); st != 403 {
		t.Fatalf("booker configures: %d", st)
	}
	if st, _ := httpDo(t, "PUT", p.URL+"/v1/calendars/p1", admin, `{}`); st != 201 {
		t.Fatalf("admin configures: %d", st)
	}
	if st, b := httpDo(t, "POST", p.URL+"/v1/calendars/p1/bookings", booker, `{"start":"2027-01-01T10:00:00Z","end":"2027-01-01T11:00:00Z","customer":"x"}`); st != 201 {
		t.Fatalf("booker books: %d %s", st, b)
	}
	if st, _ := httpDo(t, "POST", p.URL+"/v1/calendars/p2/bookings", booker, `{"start":"2027-01-01T10:00:00Z","end":"2027-01-01T11:00:00Z","customer":"x"}`); st != 403 {
		t.Fatalf("booker on another calendar: %d", st)
	}
	// The writer counts a batch after it sent its replies: poll.
	var b []byte
	queuetest.CheckFor(t, 10*time.Second, func() error {
		var st int
		st, b = httpDo(t, "GET", p.URL+"/metrics", "", "")
		if st != 200 || !strings.Contains(string(b), `bookline_commands_total{outcome="accepted",reason="none",type="booking.create"} 1`) {
			return fmt.Errorf("metrics: %d\n%s", st, b)
		}
		return nil
	})
	if !strings.Contains(string(b), `bookline_invariant_violations_total{invariant="slot_overlap"} 0`) {
		t.Fatalf("metrics without the invariant violations:\n%s", b)
	}
	m := regexp.MustCompile(`msg="pprof listening" addr=(\S+)`).FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("no pprof address in the log:\n%s", p.output())
	}
	if st, _ := httpDo(t, "GET", "http://"+m[1]+"/debug/pprof/cmdline", "", ""); st != 200 {
		t.Fatalf("pprof: %d", st)
	}
	if st, _ := httpDo(t, "GET", p.URL+"/debug/pprof/cmdline", "", ""); st != 404 {
		t.Fatalf("pprof on the API address: %d", st)
	}
	nats := regexp.MustCompile(`msg="embedded nats listening" url=(\S+)`).FindStringSubmatch(p.output())
	if nats == nil {
		t.Fatal("no nats url in the log")
	}
	// With API keys the embedded NATS server asks for credentials too:
	// an admin tool needs the admin role's, printed by nats-credentials.
	adminNK := filepath.Join(dir, "admin.nk")
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"nats-credentials", "--data-dir", filepath.Join(dir, "data"), "--role", "admin"}, &out, &errb); code != 0 {
		t.Fatalf("nats-credentials: %d %s", code, errb.String())
	}
	seed := out.String()
	if err := os.WriteFile(adminNK, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BOOKLINE_API_KEY", admin)
	out.Reset()
	if code := Main(context.Background(), []string{"verify", "--url", p.URL, "--nats-url", nats[1]}, &out, &errb); code == 0 ||
		!strings.Contains(strings.ToLower(errb.String()), "authorization") {
		t.Fatalf("verify without NATS credentials: %d %s %s", code, out.String(), errb.String())
	}
	t.Setenv("BOOKLINE_API_KEY", "")
	out.Reset()
	errb.Reset()
	if code := Main(context.Background(), []string{"verify", "--url", p.URL, "--nats-url", nats[1], "--nkey", adminNK}, &out, &errb); code == 0 {
		t.Fatalf("verify without a key succeeded: %s", out.String())
	}
	t.Setenv("BOOKLINE_API_KEY", admin)
	out.Reset()
	errb.Reset()
	if code := Main(context.Background(), []string{"verify", "--url", p.URL, "--nats-url", nats[1], "--nkey", adminNK}, &out, &errb); code != 0 {
		t.Fatalf("verify with the admin key: %d %s %s", code, out.String(), errb.String())
	}
	logs := p.output()
	for _, line := range strings.Split(seed, "\n") {
		if strings.HasPrefix(line, "SU") && strings.Contains(logs, line) {
			t.Fatal("a NATS seed in the logs")
		}
	}
	if !strings.Contains(logs, `msg="http request"`) || !strings.Contains(logs, "key=web") {
		t.Fatalf("no debug request log lines:\n%s", logs)
	}
	for _, k := range []string{admin, booker} {
		if strings.Contains(logs, k) {
			t.Fatalf("key %q in the logs:\n%s", k, logs)
		}
	}
}

// TestServeBookingPage: keys from BOOKLINE_API_KEYS with a publishable key
// give calendar alice its page, the key reads availability and holds but
// no bookings, and --page-rate-burst (from BOOKLINE_PAGE_RATE_BURST)
// limits a client using it.
func TestServeBookingPage(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	const admin, page = "bk_test_admin_key_0123456789", "pk_test_page_key_0123456789"
	t.Setenv("BOOKLINE_API_KEYS", fmt.Sprintf(`[{"name":"ops","role":"admin","sha256":%q},{"name":"alice-page","role":"publishable","sha256":%q,"calendars":["alice"],"origins":["https://shop.example"]}]`,
		httpapi.HashKey(admin), httpapi.HashKey(page)))
	t.Setenv("BOOKLINE_PAGE_RATE_BURST", "6")
	dir := t.TempDir()
	p := startProc(t, "serve", "--data-dir", filepath.Join(dir, "data"), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--page-rate-limit", "0.01")
	if st, b := httpDo(t, "PUT", p.URL+"/v1/calendars/alice", admin, `{"name":"Alice","timezone":"Europe/Berlin"}`); st != 201 {
		t.Fatalf("create calendar: %d %s", st, b)
	}
	if st, b := httpDo(t, "GET", p.URL+"/book/alice?key="+page, "", ""); st != 200 || !strings.Contains(string(b), `<bookline-booking calendar="alice" key="`+page+`">`) {
		t.Fatalf("page: %d %s", st, b)
	}
	if st, _ := httpDo(t, "GET", p.URL+"/book/alice", "", ""); st != 404 {
		t.Fatalf("page without key: %d", st)
	}
	if st, b := httpDo(t, "GET", p.URL+"/ui/bookline.js", "", ""); st != 200 || !strings.Contains(string(b), "bookline-booking") {
		t.Fatalf("script: %d", st)
	}
	if st, b := httpDo(t, "GET", p.URL+"/v1/calendars/alice/availability?from=2027-01-04T00:00:00Z&to=2027-01-05T00:00:00Z&duration=30m", page, ""); st != 200 {
		t.Fatalf("availability with the publishable key: %d %s", st, b)
	}
	if st, b := httpDo(t, "POST", p.URL+"/v1/calendars/alice/holds", page, `{"start":"2027-01-04T10:00:00Z","end":"2027-01-04T10:30:00Z","customer":"Ann"}`); st != 201 {
		t.Fatalf("hold with the publishable key: %d %s", st, b)
	}
	if st, _ := httpDo(t, "GET", p.URL+"/v1/calendars/alice/bookings", page, ""); st != 403 {
		t.Fatalf("bookings with the publishable key: %d", st)
	}
	// 2 requests took a token so far (a 403 takes none); the bucket holds 6.
	limited := 0
	for i := 0; i < 5; i++ {
		if st, _ := httpDo(t, "GET", p.URL+"/v1/calendars/alice/page", page, ""); st == 429 {
			limited++
		}
	}
	if limited != 1 {
		t.Fatalf("%d 429s after 7 requests with --page-rate-burst 6, want 1", limited)
	}
	if st, _ := httpDo(t, "GET", p.URL+"/v1/calendars/alice", admin, ""); st != 200 {
		t.Fatalf("the admin key is limited with the page: %d", st)
	}
}

// TestGracefulShutdownUnderLoad sends SIGTERM while 16 clients book: every
// answer is one the API defines (no 5xx but 503), the process exits 0, and
// after a restart every 201 is in the index.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	args := []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--nats-listen", "", "--partitions", "4", "--rate-limit", "0"}
	p := startProc(t, args...)
	cals := []string{"g1", "g2", "g3"}
	for _, c := range cals {
		if st, _ := httpDo(t, "PUT", p.URL+"/v1/calendars/"+c, "", `{}`); st != 201 {
			t.Fatalf("create %s: %d", c, st)
		}
	}
	var (
		mu        sync.Mutex
		confirmed = map[string]string{} // booking id -> calendar
		statuses  = map[int]int{}
		ok201     atomic.Int64
		connErrs  atomic.Int64
		wg        sync.WaitGroup
	)
	client := &http.Client{Timeout: 30 * time.Second}
	base := time.Date(2027, 6, 1, 0, 0, 0, 0, time.UTC)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				cal := cals[(w+i)%len(cals)]
				start := base.Add(time.Duration((w*7919+i*104729)%20000) * 15 * time.Minute)
				body := fmt.Sprintf(`{"start":%q,"end":%q,"customer":"w%d"}`, start.Format(time.RFC3339), start.Add(30*time.Minute).Format(time.RFC3339), w)
				resp, err := client.Post(p.URL+"/v1/calendars/"+cal+"/bookings", "application/json", strings.NewReader(body))
				if err != nil {
					// The listener is gone: connection errors are expected
					// after shutdown; stop after a few.
					if connErrs.Add(1) > 64 {
						return
					}
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				if resp.StatusCode == 201 {
					var bk booking
					if err := json.Unmarshal(b, &bk); err != nil {
						t.Errorf("decode 201: %v", err)
					}
					confirmed[bk.ID] = cal
				}
				mu.Unlock()
				if resp.StatusCode == 201 {
					ok201.Add(1)
				}
			}
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for ok201.Load() < 300 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exitErr := p.wait(t)
	wg.Wait()
	if exitErr != nil {
		t.Fatalf("exit after SIGTERM: %v", exitErr)
	}
	for st, n := range statuses {
		switch {
		case st == 201 || st == 409 || st == 202 || st == 503:
		default:
			t.Errorf("%d answers with status %d", n, st)
		}
	}
	if len(confirmed) < 100 {
		t.Fatalf("only %d bookings confirmed: %v", len(confirmed), statuses)
	}
	p2 := startProc(t, args...)
	found := map[string]bool{}
	for _, c := range cals {
		for id := range listAll(t, p2.URL, c) {
			found[id] = true
		}
	}
	for id, cal := range confirmed {
		if !found[id] {
			t.Errorf("booking %s (%s) answered 201 before SIGTERM but missing after restart", id, cal)
		}
	}
	t.Logf("statuses %v; %d confirmed, all present after restart; %d connection errors after shutdown", statuses, len(confirmed), connErrs.Load())
}
