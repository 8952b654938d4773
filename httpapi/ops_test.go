package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

const (
	adminKey   = "bk_admin_0123456789abcdef-ADMIN"
	bookerKey  = "bk_booker_0123456789abcdef-ALL"
	aliceKey   = "bk_booker_0123456789abcdef-ALICE"
	unknownKey = "bk_unknown_0123456789abcdef"
)

func testKeyring(t testing.TB) *httpapi.Keyring {
	t.Helper()
	kr, err := httpapi.NewKeyring([]httpapi.KeySpec{
		{Name: "ops", Role: httpapi.RoleAdmin, SHA256: httpapi.HashKey(adminKey)},
		{Name: "web", Role: httpapi.RoleBooker, SHA256: httpapi.HashKey(bookerKey)},
		{Name: "alice-only", Role: httpapi.RoleBooker, SHA256: "sha256:" + strings.ToUpper(httpapi.HashKey(aliceKey)), Calendars: []string{"alice"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func bearer(k string) []string { return []string{"Authorization", "Bearer " + k} }

func TestAuthOutcomes(t *testing.T) {
	logs := &queuetest.SyncBuffer{}
	h := start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = testKeyring(t)
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}})
	slot := bookingBody(base, time.Hour, "x")
	cases := []struct {
		name         string
		method, path string
		body         any
		headers      []string
		status       int
		code         string
	}{
		{"no key", "POST", "/v1/calendars/alice/bookings", slot, nil, 401, "unauthorized"},
		{"no key, read", "GET", "/v1/calendars/alice", nil, nil, 401, "unauthorized"},
		{"bad key", "POST", "/v1/calendars/alice/bookings", slot, bearer(unknownKey), 401, "unauthorized"},
		{"not bearer", "GET", "/v1/calendars/alice", nil, []string{"Authorization", "Basic " + bookerKey}, 401, "unauthorized"},
		{"empty bearer", "GET", "/v1/calendars/alice", nil, []string{"Authorization", "Bearer "}, 401, "unauthorized"},
		{"booker configures a calendar", "PUT", "/v1/calendars/alice", map[string]string{"timezone": "UTC"}, bearer(bookerKey), 403, "forbidden"},
		{"booker reads the digest", "GET", "/v1/admin/digest", nil, bearer(bookerKey), 403, "forbidden"},
		{"admin creates alice", "PUT", "/v1/calendars/alice", map[string]string{"timezone": "UTC"}, bearer(adminKey), 201, ""},
		{"admin creates bob", "PUT", "/v1/calendars/bob", map[string]string{"timezone": "UTC"}, bearer(adminKey), 201, ""},
		{"admin digest", "GET", "/v1/admin/digest", nil, bearer(adminKey), 200, ""},
		{"booker reads the cluster status", "GET", "/v1/admin/cluster", nil, bearer(bookerKey), 403, "forbidden"},
		{"admin cluster status (one instance)", "GET", "/v1/admin/cluster", nil, bearer(adminKey), 200, ""},
		{"limited booker, other calendar", "POST", "/v1/calendars/bob/bookings", slot, bearer(aliceKey), 403, "forbidden"},
		{"limited booker, other calendar read", "GET", "/v1/calendars/bob/bookings", nil, bearer(aliceKey), 403, "forbidden"},
		{"limited booker, its calendar", "POST", "/v1/calendars/alice/bookings", slot, bearer(aliceKey), 201, ""},
		{"booker, any calendar", "POST", "/v1/calendars/bob/bookings", slot, bearer(bookerKey), 201, ""},
		{"booker reads", "GET", "/v1/calendars/bob/bookings", nil, bearer(bookerKey), 200, ""},
		{"admin books too", "POST", "/v1/calendars/bob/bookings", bookingBody(base.Add(time.Hour), time.Hour, "y"), bearer(adminKey), 201, ""},
		{"lower-case scheme", "GET", "/v1/calendars/alice", nil, []string{"Authorization", "bearer " + aliceKey}, 200, ""},
		{"public healthz", "GET", "/healthz", nil, nil, 200, ""},
		{"public livez", "GET", "/livez", nil, nil, 200, ""},
		{"public readyz", "GET", "/readyz", nil, nil, 200, ""},
		{"public metrics", "GET", "/metrics", nil, nil, 200, ""},
		{"public spec", "GET", "/openapi.yaml", nil, nil, 200, ""},
	}
	for _, tc := range cases {
		r := h.do(tc.method, tc.path, tc.body, tc.headers...)
		if r.Status != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, r.Status, tc.status, r.Body)
			continue
		}
		if tc.code != "" {
			if got := r.errorCode(t); got != tc.code {
				t.Errorf("%s: code %q, want %q", tc.name, got, tc.code)
			}
		}
		if tc.status == 401 && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 without WWW-Authenticate: %v", tc.name, r.Header)
		}
	}
	// Keys never reach the logs, whatever the outcome.
	out := logs.String()
	if !strings.Contains(out, "authentication failed") || !strings.Contains(out, `key=alice-only`) {
		t.Fatalf("expected auth failure and key-name log lines (is the capture working?):\n%s", out)
	}
	for _, k := range []string{adminKey, bookerKey, aliceKey, unknownKey, "bk_"} {
		if strings.Contains(out, k) {
			t.Errorf("log contains key material %q:\n%s", k, out)
		}
	}
}

func TestKeyringConfigErrors(t *testing.T) {
	h := httpapi.HashKey("k")
	for name, specs := range map[string][]httpapi.KeySpec{
		"bad role":            {{Name: "a", Role: "root", SHA256: h}},
		"bad hash":            {{Name: "a", Role: "admin", SHA256: "abc"}},
		"raw key as hash":     {{Name: "a", Role: "admin", SHA256: "k"}},
		"duplicate name":      {{Name: "a", Role: "admin", SHA256: h}, {Name: "a", Role: "booker", SHA256: httpapi.HashKey("j")}},
		"duplicate key":       {{Name: "a", Role: "admin", SHA256: h}, {Name: "b", Role: "booker", SHA256: h}},
		"admin with calendar": {{Name: "a", Role: "admin", SHA256: h, Calendars: []string{"x"}}},
		"bad calendar":        {{Name: "a", Role: "booker", SHA256: h, Calendars: []string{"no spaces"}}},
		"no name":             {{Role: "booker", SHA256: h}},
	} {
		if _, err := httpapi.NewKeyring(specs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := httpapi.ParseKeys([]byte(`[{"name":"a","role":"admin","sha256":"` + h + `","key":"k"}]`)); err == nil {
		t.Error("unknown field in keys accepted")
	}
	specs, err := httpapi.ParseKeys([]byte(`[{"name":"a","role":"booker","sha256":"` + h + `","calendars":["x"]}]`))
	if err != nil || len(specs) != 1 || specs[0].Calendars[0] != "x" {
		t.Fatalf("parse keys: %v %+v", err, specs)
	}
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "[::1]:1": true, "localhost:80": true, "127.1.2.3:0": true,
		"0.0.0.0:8080": false, ":8080": false, "10.0.0.1:80": false, "example.com:80": false, "[::]:80": false, "nonsense": false} {
		if got := httpapi.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
}

func TestLimits(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) {
		c.BodyLimit = 2048
		c.HeaderLimit = 1024
		c.MaxListRange = 31 * 24 * time.Hour
		c.MaxListLimit = 50
		c.ReadTimeout = 400 * time.Millisecond
	}})
	h.createCalendar("lim", "UTC")

	// Body size.
	big := fmt.Sprintf(`{"start":"2027-01-01T10:00:00Z","end":"2027-01-01T11:00:00Z","customer":"x","metadata":{"pad":%q}}`, strings.Repeat("a", 4096))
	r := h.do("POST", "/v1/calendars/lim/bookings", big)
	if r.Status != 413 || r.errorCode(t) != "payload_too_large" {
		t.Errorf("large body: %d %s", r.Status, r.Body)
	}
	// A client still sending a refused body reads the refusal, not a
	// connection reset (two in three did when the socket closed at once).
	huge := fmt.Sprintf(`{"customer":"x","metadata":{"pad":%q}}`, strings.Repeat("a", 1<<20))
	for i := 0; i < 30; i++ {
		r = h.do("POST", "/v1/calendars/lim/bookings", huge)
		if r.Status != 413 || r.errorCode(t) != "payload_too_large" {
			t.Fatalf("1 MiB body: %d %s", r.Status, r.Body)
		}
	}
	// Header size.
	r = h.do("GET", "/v1/calendars/lim", nil, "X-Padding", strings.Repeat("p", 2048))
	if r.Status != 431 || r.errorCode(t) != "headers_too_large" {
		t.Errorf("large headers: %d %s", r.Status, r.Body)
	}
	// Id formats.
	for _, p := range []string{"/v1/calendars/" + strings.Repeat("c", 65), "/v1/calendars/bad%20id", "/v1/calendars/lim/requests/bad%20id"} {
		r = h.do("GET", p, nil)
		if r.Status != 400 || r.errorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s", p, r.Status, r.Body)
		}
	}
	// List range and page size.
	r = h.do("GET", "/v1/calendars/lim/bookings?from=2027-01-01T00:00:00Z&to=2027-02-01T00:00:01Z", nil)
	if r.Status != 400 || r.errorCode(t) != "range_too_large" {
		t.Errorf("long range: %d %s", r.Status, r.Body)
	}
	h.mustStatus(h.do("GET", "/v1/calendars/lim/bookings?from=2027-01-01T00:00:00Z&to=2027-02-01T00:00:00Z", nil), 200)
	h.mustStatus(h.do("GET", "/v1/calendars/lim/bookings?from=2027-01-01T00:00:00Z", nil), 200) // open-ended: paged instead
	r = h.do("GET", "/v1/calendars/lim/bookings?limit=51", nil)
	if r.Status != 400 || r.errorCode(t) != "invalid_request" || !strings.Contains(string(r.Body), "1 to 50") {
		t.Errorf("limit 51: %d %s", r.Status, r.Body)
	}
	h.mustStatus(h.do("GET", "/v1/calendars/lim/bookings?limit=50", nil), 200)

	// Read timeout: a client that stops in the middle of its headers.
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /v1/calendars/lim HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read timeout answer: %v", err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != 408 || !strings.Contains(body.String(), `"request_timeout"`) {
		t.Errorf("slow client: %d %s", resp.StatusCode, body.String())
	}
}

func TestRateLimitAnswer(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = testKeyring(t)
		// A token every 100 s: at one every 2 s, a machine slow enough to
		// take 2 s over the first two requests let the third through.
		c.RateLimit = 0.01
		c.RateBurst = 2
	}})
	for i := 0; i < 2; i++ {
		h.mustStatus(h.do("GET", "/v1/admin/digest", nil, bearer(adminKey)...), 200)
	}
	r := h.do("GET", "/v1/admin/digest", nil, bearer(adminKey)...)
	if r.Status != 429 || r.errorCode(t) != "rate_limited" {
		t.Fatalf("third request: %d %s", r.Status, r.Body)
	}
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 50 || ra > 100 {
		t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	// Buckets are per key: another key is not limited by the first.
	h.mustStatus(h.do("GET", "/v1/calendars/x", nil, bearer(bookerKey)...), 404)
	// Health, readiness and metrics are never limited.
	for i := 0; i < 5; i++ {
		h.mustStatus(h.do("GET", "/healthz", nil), 200)
		h.mustStatus(h.do("GET", "/metrics", nil), 200)
	}
}

// TestRateLimitConcurrentHTTP: many goroutines on one key; what is allowed
// must fit the bucket: burst + rate * elapsed (+1 for rounding), and at
// least the burst.
func TestRateLimitConcurrentHTTP(t *testing.T) {
	const rate, burst = 20.0, 25
	h := start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = testKeyring(t)
		c.RateLimit = rate
		c.RateBurst = burst
	}})
	var ok, limited, other atomic.Int64
	var ready, wg sync.WaitGroup
	ready.Add(1)
	began := time.Now()
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Wait()
			for i := 0; i < 10; i++ {
				r, err := h.try("GET", "/v1/calendars/none", nil, bearer(bookerKey)...)
				switch {
				case err != nil:
					other.Add(1)
				case r.Status == 404:
					ok.Add(1)
				case r.Status == 429:
					limited.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	ready.Done()
	wg.Wait()
	elapsed := time.Since(began).Seconds()
	maxAllowed := int64(burst + rate*elapsed + 1)
	if ok.Load() < burst || ok.Load() > maxAllowed || other.Load() != 0 || ok.Load()+limited.Load() != 320 {
		t.Fatalf("allowed %d (want %d..%d over %.2fs), limited %d, other %d", ok.Load(), burst, maxAllowed, elapsed, limited.Load(), other.Load())
	}
	t.Logf("allowed %d, limited %d in %.2fs", ok.Load(), limited.Load(), elapsed)
}

// metricValue sums the samples of name whose labels include all of want.
func metricValue(text, name string, want map[string]string) (float64, bool) {
	var sum float64
	found := false
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		labels := line[len(name):sp]
		match := true
		for k, v := range want {
			if !strings.Contains(labels, k+`="`+v+`"`) {
				match = false
			}
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// TestMetricsAfterWorkload runs bookings with conflicts and invalid input,
// then finds the counters in /metrics consistent with what the clients saw.
func TestMetricsAfterWorkload(t *testing.T) {
	h := start(t, "", options{partitions: 3})
	cals := []string{"m1", "m2"}
	for _, c := range cals {
		h.createCalendar(c, "UTC")
	}
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < 120; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := bookingBody(base.Add(time.Duration(i%20)*30*time.Minute), time.Hour, fmt.Sprintf("c%d", i))
			r, err := h.try("POST", "/v1/calendars/"+cals[i%2]+"/bookings", body)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	h.mustStatus(h.do("POST", "/v1/calendars/nocal/bookings", bookingBody(base, time.Hour, "x")), 404)
	h.mustStatus(h.do("POST", "/v1/calendars/m1/bookings", `{"start":"nope"}`), 400) // never reaches the writer
	if statuses[201] == 0 || statuses[409] == 0 || statuses[201]+statuses[409] != 120 {
		t.Fatalf("statuses %v", statuses)
	}
	route := "/v1/calendars/:calendarId/bookings"
	var text string
	var logged float64 // commands in the stream
	// The writer counts a command after sending its reply: poll.
	queuetest.CheckFor(t, 10*time.Second, func() error {
		r := h.do("GET", "/metrics", nil)
		text = string(r.Body)
		// The bookings carry no Idempotency-Key: a conflict with a
		// committed booking is refused from the index, one with a
		// booking still in the log by the writer. Together they are
		// every 409. The one on a missing calendar is refused from
		// the index.
		fromIndex, _ := metricValue(text, "bookline_refused_from_index_total", map[string]string{"type": "booking.create", "reason": "slot_taken"})
		// The missing calendar is refused from the index unless a
		// commit (the outbox's, say) was still waiting for its sync
		// then: that refusal never waits, it leaves the request to the
		// writer, which logs it. Either way exactly one refusal.
		missingIndex, _ := metricValue(text, "bookline_refused_from_index_total", map[string]string{"type": "booking.create", "reason": "calendar_not_found"})
		missingWriter, _ := metricValue(text, "bookline_commands_total", map[string]string{"type": "booking.create", "outcome": "rejected", "reason": "calendar_not_found"})
		if missingIndex+missingWriter != 1 {
			return fmt.Errorf("calendar_not_found refused %v times from the index and %v by the writers, want 1 in all", missingIndex, missingWriter)
		}
		// The stream also begins with the schema version 2 marker of
		// each partition (docs/protocol.md, "Versions").
		logged = float64(len(h.node.Parts())) + 2 + float64(statuses[201]) + float64(statuses[409]) - fromIndex + missingWriter
		checks := []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{"bookline_commands_total", map[string]string{"type": "booking.create", "outcome": "accepted", "reason": "none"}, float64(statuses[201])},
			{"bookline_commands_total", map[string]string{"type": "calendar.upsert", "outcome": "accepted"}, 2},
			{"bookline_http_requests_total", map[string]string{"method": "POST", "route": route, "status": "201"}, float64(statuses[201])},
			{"bookline_http_requests_total", map[string]string{"method": "POST", "route": route, "status": "409"}, float64(statuses[409])},
			{"bookline_http_requests_total", map[string]string{"method": "POST", "route": route, "status": "400"}, 1},
			{"bookline_http_request_duration_seconds_count", map[string]string{"method": "POST", "route": route}, 122},
			{"bookline_partition_batch_size_sum", nil, logged},
			{"bookline_outbox_pending_events", nil, 0},
			{"bookline_ready", nil, 1},
			{"bookline_storage_failing", map[string]string{"component": "index"}, 0},
			{"bookline_storage_failing", map[string]string{"component": "nats"}, 0},
			{"bookline_storage_write_failures_total", map[string]string{"component": "index"}, 0},
		}
		// Absent when every conflict was refused from the index.
		if got, _ := metricValue(text, "bookline_commands_total", map[string]string{"type": "booking.create", "outcome": "rejected", "reason": "slot_taken"}); got != float64(statuses[409])-fromIndex {
			return fmt.Errorf("slot_taken decided by the writers %v, want %v (409s) - %v (refused from the index)", got, statuses[409], fromIndex)
		}
		for _, c := range checks {
			got, ok := metricValue(text, c.name, c.labels)
			if !ok || got != c.want {
				return fmt.Errorf("%s%v = %v (found %v), want %v\n%s", c.name, c.labels, got, ok, c.want, grepLines(text, "bookline_http_requests_total"))
			}
		}
		return nil
	})
	var applied float64
	for p := 0; p < 3; p++ {
		v, ok := metricValue(text, "bookline_partition_applied_sequence", map[string]string{"partition": strconv.Itoa(p)})
		if !ok {
			t.Errorf("no applied sequence for partition %d", p)
		}
		applied = max(applied, v)
		if v, ok := metricValue(text, "bookline_partition_consumer_pending", map[string]string{"partition": strconv.Itoa(p)}); !ok || v != 0 {
			t.Errorf("partition %d consumer pending %v %v", p, v, ok)
		}
	}
	if applied != logged { // the stream's last sequence is applied by some partition
		t.Errorf("highest applied sequence %v, want %v", applied, logged)
	}
	for _, name := range []string{"bookline_partition_apply_latency_seconds_count", "bookline_index_commits_total", "bookline_partition_caught_up", "go_goroutines", "bookline_http_requests_total"} {
		if _, ok := metricValue(text, name, nil); !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	// The default mode syncs the command stream per group commit.
	if v, ok := metricValue(text, "bookline_log_sync_duration_seconds_count", map[string]string{"stream": "BOOKLINE_CMD"}); !ok || v == 0 {
		t.Errorf("command stream syncs %v %v, want some", v, ok)
	}
	// Raw paths never become labels.
	if strings.Contains(text, `route="/v1/calendars/m1`) {
		t.Error("raw path used as a route label")
	}
	h.do("GET", "/no/such/route", nil)
	r := h.do("GET", "/metrics", nil)
	if v, _ := metricValue(string(r.Body), "bookline_http_requests_total", map[string]string{"route": "unmatched", "status": "404"}); v != 1 {
		t.Errorf("unmatched route counted %v", v)
	}
}

func TestRequestIDTravels(t *testing.T) {
	h := start(t, "", options{partitions: 2})
	h.createCalendar("tr", "UTC")
	r := h.do("POST", "/v1/calendars/tr/bookings", bookingBody(base, time.Hour, "x"), "X-Request-Id", "trace-abc.123")
	h.mustStatus(r, 201)
	if got := r.Header.Get("X-Request-Id"); got != "trace-abc.123" {
		t.Fatalf("X-Request-Id answered %q", got)
	}
	r = h.do("GET", "/v1/calendars/tr", nil, "X-Request-Id", "has space")
	if got := r.Header.Get("X-Request-Id"); got == "" || got == "has space" {
		t.Fatalf("invalid X-Request-Id kept or none generated: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := h.node.JetStream().Stream(ctx, queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, fmt.Sprintf("%s%d.tr", queue.PartitionSubjectPrefix, queue.PartitionOf("tr", 2)))
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(queue.HeaderTraceID); got != "trace-abc.123" {
		t.Fatalf("%s = %q in the stream", queue.HeaderTraceID, got)
	}
}

func TestHealthReadyLive(t *testing.T) {
	h := start(t, "", options{})
	for _, p := range []string{"/healthz", "/readyz", "/livez"} {
		h.mustStatus(h.do("GET", p, nil), 200)
	}
	h.api.SetDraining()
	for _, p := range []string{"/healthz", "/readyz"} {
		r := h.do("GET", p, nil)
		if r.Status != 503 || r.errorCode(t) != "unavailable" || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s while draining: %d %s", p, r.Status, r.Body)
		}
	}
	h.mustStatus(h.do("GET", "/livez", nil), 200)
	h.node.StopWriters()
	r := h.do("GET", "/readyz", nil)
	if r.Status != 503 || !strings.Contains(string(r.Body), "writers stopped") {
		t.Errorf("readyz with writers stopped: %d %s", r.Status, r.Body)
	}
	h.node.StartWriters()
}

// TestOpenAPIMatchesRoutes: the spec's paths and methods are exactly the
// routes registered in Fiber, and GET /openapi.yaml serves it.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var spec struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(httpapi.OpenAPISpec, &spec); err != nil {
		t.Fatalf("spec is not YAML: %v", err)
	}
	if !strings.HasPrefix(spec.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", spec.OpenAPI)
	}
	var inSpec []string
	for p, ops := range spec.Paths {
		fiberPath := p
		for strings.Contains(fiberPath, "{") {
			i, j := strings.Index(fiberPath, "{"), strings.Index(fiberPath, "}")
			fiberPath = fiberPath[:i] + ":" + fiberPath[i+1:j] + fiberPath[j+1:]
		}
		for m := range ops {
			if m == "parameters" || m == "summary" || m == "description" {
				continue
			}
			inSpec = append(inSpec, strings.ToUpper(m)+" "+fiberPath)
		}
	}
	srv := httpapi.New(nil, httpapi.Config{})
	var inFiber []string
	for _, r := range srv.App().GetRoutes(true) {
		if r.Method == "HEAD" {
			continue
		}
		inFiber = append(inFiber, r.Method+" "+r.Path)
	}
	sort.Strings(inSpec)
	sort.Strings(inFiber)
	if strings.Join(inSpec, "\n") != strings.Join(inFiber, "\n") {
		t.Fatalf("spec routes:\n%s\n\nfiber routes:\n%s", strings.Join(inSpec, "\n"), strings.Join(inFiber, "\n"))
	}
	if len(inFiber) < 13 {
		t.Fatalf("only %d routes", len(inFiber))
	}
	h := start(t, "", options{})
	r := h.do("GET", "/openapi.yaml", nil)
	if r.Status != 200 || !bytes.Equal(r.Body, httpapi.OpenAPISpec) {
		t.Fatalf("served spec: %d, %d bytes", r.Status, len(r.Body))
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
