package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/httpapi"
)

func TestPercentileNearestRank(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond // 1..100 ms
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 50, 7 * time.Millisecond},
		{"one p99", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 1..100", hundred, 50, 50 * time.Millisecond},
		{"p95 of 1..100", hundred, 95, 95 * time.Millisecond},
		{"p99 of 1..100", hundred, 99, 99 * time.Millisecond},
		{"p100 of 1..100", hundred, 100, 100 * time.Millisecond},
		{"p50 of 4", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p51 of 4", ms(1, 2, 3, 4), 51, 3 * time.Millisecond},
		{"p99 of 10", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"tiny p", ms(1, 2, 3), 0.001, 1 * time.Millisecond},
	} {
		if got := percentile(tc.samples, tc.p); got != tc.want {
			t.Errorf("%s: percentile(%v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

func TestLatencyStatsSortsAndSummarises(t *testing.T) {
	s := []time.Duration{5 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	l := latencyStats(s)
	if l.P50 != 3 || l.P99 != 5 || l.Max != 5 || l.Mean != 3 || l.P95 != 5 {
		t.Errorf("latencyStats = %+v", *l)
	}
	if latencyStats(nil) != nil {
		t.Error("latencyStats(nil) should be nil")
	}
}

func TestCheckCalendarFindsProblems(t *testing.T) {
	at := func(h int) time.Time { return benchEpoch.Add(time.Duration(h) * time.Hour) }
	listed := []listedBooking{
		{ID: "c", Start: at(5), End: at(6), Status: "confirmed"},
		{ID: "a", Start: at(0), End: at(3), Status: "confirmed"},
		{ID: "b", Start: at(1), End: at(2), Status: "confirmed"}, // inside a
		{ID: "d", Start: at(6), End: at(7), Status: "confirmed"}, // touches c: fine
		{ID: "x", Start: at(8), End: at(9), Status: "confirmed"},
	}
	var a AuditResult
	var problems []string
	checkCalendar("cal", listed, map[string]bool{"a": true, "d": true, "gone": true}, map[string]bool{"x": true}, &a,
		func(f string, args ...any) { problems = append(problems, f) })
	if a.Overlaps != 1 || a.Missing != 1 || a.Expected != 3 || a.CancelledListed != 1 || a.Listed != 5 {
		t.Errorf("audit = %+v, problems %v", a, problems)
	}

	a, problems = AuditResult{}, nil
	checkCalendar("cal", listed[3:4], map[string]bool{"d": true}, nil, &a, func(f string, args ...any) { problems = append(problems, f) })
	if len(problems) != 0 {
		t.Errorf("clean calendar reported %v", problems)
	}
}

func TestBenchFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"bench", "--scenario", "nope"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "--scenario") {
		t.Errorf("bad scenario: exit %d, stderr %s", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"bench", "--scenario", "import", "--abusers", "2"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "--abusers") {
		t.Errorf("abusers on import: exit %d, stderr %s", code, errb.String())
	}
	t.Setenv("BOOKLINE_CLIENTS", "0")
	errb.Reset()
	if code := Main(context.Background(), []string{"bench"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "--clients") {
		t.Errorf("BOOKLINE_CLIENTS=0: exit %d, stderr %s", code, errb.String())
	}
}

// TestBenchSmoke runs the generator briefly in every scenario against an
// in-process bookline (embedded NATS, real bbolt, the Fiber API on a loopback
// port) and checks the JSON report and the audit. No timing assertions: it
// keeps the generator from rotting.
func TestBenchSmoke(t *testing.T) {
	node := startImportNode(t, 0)
	api := httpapi.New(node, httpapi.Config{ReplyTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Ports: apiPorts(node, nil, nil)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = api.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = api.App().Shutdown()
		<-served
	})
	url := "http://" + ln.Addr().String()

	for _, sc := range []string{"uniform", "hot", "mixed", "collective", "import"} {
		t.Run(sc, func(t *testing.T) {
			args := []string{"bench", "--url", url, "--scenario", sc, "--clients", "8", "--warmup", "200ms",
				"--duration", "2s", "--calendar-prefix", "smoke-" + sc, "--json"}
			switch sc {
			case "uniform", "mixed":
				args = append(args, "--calendars", "5", "--days", "2")
				if sc == "uniform" {
					args = append(args, "--abusers", "2", "--abuse-bookings", "50")
				}
			case "collective": // the node's 4 partitions
				args = append(args, "--calendars", "6", "--days", "2", "--partitions", "4")
			case "import":
				args = append(args, "--nats-url", node.ClientURL(), "--requests", "2000", "--calendars", "20")
			}
			var out, errb bytes.Buffer
			code := Main(context.Background(), args, &out, &errb)
			var res BenchResult
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("exit %d, report does not parse: %v\nstdout: %s\nstderr: %s", code, err, out.String(), errb.String())
			}
			if code != 0 || !res.Audit.OK {
				t.Fatalf("exit %d, audit %+v\nstderr: %s", code, res.Audit, errb.String())
			}
			if res.Scenario != sc || res.Requests == 0 || res.Throughput <= 0 {
				t.Errorf("report %+v", res)
			}
			if res.Audit.Overlaps != 0 || res.Audit.Missing != 0 || res.Audit.Listed == 0 {
				t.Errorf("audit %+v", res.Audit)
			}
			switch sc {
			case "import":
				if res.Audit.ImportedAccepted == 0 || res.Status["accepted"] == 0 {
					t.Errorf("nothing accepted: %+v", res.Status)
				}
			default:
				if res.Latency == nil || res.Latency.P50 <= 0 || res.Latency.Max < res.Latency.P99 || res.Latency.P99 < res.Latency.P50 {
					t.Errorf("latency %+v", res.Latency)
				}
				if res.Status["201"] == 0 && sc != "hot" {
					t.Errorf("no bookings created: %v", res.Status)
				}
				if res.Audit.Expected == 0 {
					t.Errorf("audit expected nothing: %+v", res.Audit)
				}
			}
			if ab := res.Abuse; (sc == "uniform") != (ab != nil) || ab != nil && (ab.Requests == 0 || ab.Status["200"] == 0 || ab.Bookings != 50) {
				t.Errorf("abusive clients: %+v", ab)
			}
			if sc == "collective" && (res.Status["409"] == 0 || res.Audit.Expected < 2*res.Status["201"]) {
				t.Errorf("collective: statuses %v, audit %+v", res.Status, res.Audit)
			}
			if sc == "hot" && res.Status["409"] == 0 {
				t.Errorf("hot scenario without conflicts: %v", res.Status)
			}
			if sc == "mixed" {
				for _, op := range []string{"book", "cancel", "list", "get"} {
					if res.Ops[op] == nil || res.Ops[op].Count == 0 {
						t.Errorf("mixed: no %s requests: %v", op, res.Ops)
					}
				}
			}
		})
	}

	// The open loop in every booking scenario: everything due is sent and
	// the audit holds (no timing assertions: the machine may be slow).
	for _, sc := range []string{"uniform", "hot", "mixed", "collective"} {
		t.Run("open-"+sc, func(t *testing.T) {
			args := []string{"bench", "--url", url, "--scenario", sc, "--rate", "200", "--warmup", "200ms",
				"--duration", "1s", "--calendar-prefix", "smoke-open-" + sc, "--json"}
			if sc != "hot" {
				args = append(args, "--calendars", "5", "--days", "2", "--partitions", "4")
			}
			var out, errb bytes.Buffer
			code := Main(context.Background(), args, &out, &errb)
			var res BenchResult
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("exit %d, report does not parse: %v\nstdout: %s\nstderr: %s", code, err, out.String(), errb.String())
			}
			if code != 0 || !res.Audit.OK {
				t.Fatalf("exit %d, audit %+v\nstderr: %s", code, res.Audit, errb.String())
			}
			o := res.OpenLoop
			if res.Mode != "open" || o == nil || o.TargetPerS != 200 || o.Scheduled != 200 || o.Sent+o.Dropped != 200 || res.Requests != o.Sent {
				t.Fatalf("mode %q, requests %d, open loop %+v", res.Mode, res.Requests, o)
			}
			if res.Latency == nil || res.Audit.Listed == 0 {
				t.Errorf("latency %+v, audit %+v", res.Latency, res.Audit)
			}
			if sc == "mixed" && (res.Ops["book"] == nil || res.Ops["list"] == nil) {
				t.Errorf("mixed: ops %v", res.Ops)
			}
		})
	}

	// The text report, and --requests instead of --duration.
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"bench", "--url", url, "--scenario", "uniform", "--clients", "4",
		"--calendars", "3", "--warmup", "0s", "--requests", "200", "--calendar-prefix", "smoke-text"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"throughput", "p99", "audit      ok", "200 requests"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if code := Main(context.Background(), []string{"bench", "--url", url, "--scenario", "uniform", "--rate", "100",
		"--calendars", "3", "--warmup", "0s", "--requests", "50", "--calendar-prefix", "smoke-open-text"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"open loop at 100 req/s", "50 due, 50 sent", "late", "from each request's due time", "audit      ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("open-loop text report lacks %q:\n%s", want, out.String())
		}
	}
}
