package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// BenchResult is the machine-readable outcome of one run (--json).
type BenchResult struct {
	Scenario string `json:"scenario"`
	URL      string `json:"url"`
	// Mode is "closed" (--clients, each waits for its answer) or "open"
	// (--rate, requests sent on a fixed schedule; see OpenLoop).
	Mode       string  `json:"mode"`
	Clients    int     `json:"clients"`
	Calendars  int     `json:"calendars"`
	Seed       uint64  `json:"seed"`
	Seconds    float64 `json:"seconds"`   // measured wall time
	Requests   int     `json:"requests"`  // measured requests (import: commands decided)
	Throughput float64 `json:"req_per_s"` // Requests / Seconds
	// Bookings201PerS is the rate of created bookings in the measured window.
	Bookings201PerS float64 `json:"bookings_per_s"`
	// Latency over every measured request (absent for import).
	Latency *LatencyStats `json:"latency,omitempty"`
	// Ops has per-operation latency and status counts ("book", "cancel",
	// "list", "get"; "import" for the import scenario).
	Ops map[string]*OpStats `json:"ops"`
	// Status counts every measured answer by HTTP status ("error" = no answer).
	Status map[string]int `json:"status"`
	// OpenLoop is the schedule's account (open loop only).
	OpenLoop *OpenLoopStats `json:"open_loop,omitempty"`
	// Abuse is the abusive clients' account (--abusers only).
	Abuse *AbuseStats `json:"abuse,omitempty"`
	Audit AuditResult `json:"audit"`
}

// OpStats are one operation's numbers.
type OpStats struct {
	Count   int            `json:"count"`
	Latency *LatencyStats  `json:"latency,omitempty"`
	Status  map[string]int `json:"status"`
}

// LatencyStats are exact nearest-rank percentiles of the recorded samples, in
// milliseconds.
type LatencyStats struct {
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted samples: the smallest sample with at least p% of the samples at or
// below it. It returns 0 for no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// latencyStats sorts samples in place and summarises them; nil for none.
func latencyStats(samples []time.Duration) *LatencyStats {
	if len(samples) == 0 {
		return nil
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	return &LatencyStats{
		P50:  ms(percentile(samples, 50)),
		P95:  ms(percentile(samples, 95)),
		P99:  ms(percentile(samples, 99)),
		Max:  ms(samples[len(samples)-1]),
		Mean: ms(sum / time.Duration(len(samples))),
	}
}

// summarise merges the clients' measured answers into a result (without
// the audit): measured from measureAt to the last measured answer.
func (r *benchRun) summarise(clients []*benchClient, measureAt time.Time) *BenchResult {
	c := r.c
	end := time.Unix(0, r.lastDone.Load())
	if end.Before(measureAt) {
		end = measureAt
	}
	res := &BenchResult{Scenario: c.scenario, URL: c.url, Mode: "closed", Clients: c.clients, Calendars: c.calendars, Seed: c.seed,
		Seconds: end.Sub(measureAt).Seconds(), Ops: map[string]*OpStats{}, Status: map[string]int{}}
	var all []time.Duration
	for _, cl := range clients {
		for op, s := range cl.samples {
			o := res.Ops[op]
			if o == nil {
				o = &OpStats{Status: map[string]int{}}
				res.Ops[op] = o
			}
			o.Count += len(s)
			all = append(all, s...)
		}
		for op, m := range cl.status {
			for st, n := range m {
				res.Ops[op].Status[st] += n
				res.Status[st] += n
				if op == "book" && st == "201" {
					res.Bookings201PerS += float64(n)
				}
			}
		}
	}
	for op, o := range res.Ops {
		var s []time.Duration
		for _, cl := range clients {
			s = append(s, cl.samples[op]...)
		}
		o.Latency = latencyStats(s)
	}
	res.Requests = len(all)
	res.Latency = latencyStats(all)
	if res.Seconds > 0 {
		res.Throughput = float64(res.Requests) / res.Seconds
		res.Bookings201PerS /= res.Seconds
	}
	return res
}

func printBenchResult(w io.Writer, res *BenchResult) {
	lat := func(l *LatencyStats) string {
		if l == nil {
			return "n/a"
		}
		return fmt.Sprintf("p50 %.2fms  p95 %.2fms  p99 %.2fms  max %.2fms  mean %.2fms", l.P50, l.P95, l.P99, l.Max, l.Mean)
	}
	if o := res.OpenLoop; o != nil {
		fmt.Fprintf(w, "scenario   %s against %s: open loop at %g req/s (at most %d in flight), %d calendars, seed %d\n",
			res.Scenario, res.URL, o.TargetPerS, o.MaxInFlight, res.Calendars, res.Seed)
	} else {
		fmt.Fprintf(w, "scenario   %s against %s: %d clients, %d calendars, seed %d\n", res.Scenario, res.URL, res.Clients, res.Calendars, res.Seed)
	}
	fmt.Fprintf(w, "throughput %.0f req/s (%d requests in %.2fs), %.0f bookings created/s\n", res.Throughput, res.Requests, res.Seconds, res.Bookings201PerS)
	if o := res.OpenLoop; o != nil {
		fmt.Fprintf(w, "schedule   %d due, %d sent (%.0f/s), %d late, %d dropped, peak %d in flight; send lag %s\n",
			o.Scheduled, o.Sent, o.SentPerS, o.Late, o.Dropped, o.PeakInFlight, lat(o.SendLag))
		fmt.Fprintf(w, "latency    %s (from each request's due time)\n", lat(res.Latency))
	} else {
		fmt.Fprintf(w, "latency    %s\n", lat(res.Latency))
	}
	fmt.Fprintf(w, "status     %s\n", countString(res.Status))
	if len(res.Ops) > 1 {
		ops := make([]string, 0, len(res.Ops))
		for op := range res.Ops {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		for _, op := range ops {
			o := res.Ops[op]
			fmt.Fprintf(w, "  %-7s  %d requests; %s; %s\n", op, o.Count, lat(o.Latency), countString(o.Status))
		}
	}
	if ab := res.Abuse; ab != nil {
		fmt.Fprintf(w, "abusers    %d clients, %d requests (%.1f/s) of %s (%d bookings in range); %s; %s\n",
			ab.Clients, ab.Requests, ab.PerS, ab.Query, ab.Bookings, lat(ab.Latency), countString(ab.Status))
	}
	a := res.Audit
	verdict := "ok"
	if !a.OK {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "audit      %s: %d calendars, %d confirmed bookings listed, %d/%d created present, %d overlaps, %d cancelled listed (%.1fs)\n",
		verdict, a.Calendars, a.Listed, a.Expected-a.Missing, a.Expected, a.Overlaps, a.CancelledListed, a.DurationSeconds)
	for _, p := range a.Problems {
		fmt.Fprintf(w, "  %s\n", p)
	}
}

func countString(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
