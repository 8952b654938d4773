package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/cmd/bookline/importfile"
	"github.com/bookline/bookline/queue"
)

const benchSummary = `Load generator for any server that speaks bookline's HTTP booking API
(bookline itself, or the PostgreSQL baseline in cmd/pgbaseline), then an
audit of the target through the same API.

Scenarios:
  uniform  --clients concurrent clients book random intervals (15-minute grid,
           15..120 minutes) on --calendars calendars over --days days.
  hot      every client books on one calendar over one day: mostly conflicts
           (409 slot_taken) once the day is full.
  mixed    books (50%), cancels of the client's own bookings (15%), lists of a
           random day (20%) and reads of one own booking (15%).
  import   publishes --requests booking.create commands straight to the NATS
           command stream (--nats-url), like bookline import; bookline only.
           Throughput only: replies are matched, not timed.

By default the load is a closed loop: each of --clients clients sends its
next request when the previous one is answered, so a slow server is sent
less (and its latency looks better than its users would see it). --rate N
makes it an open loop instead: request i is due at start + i/N seconds,
whatever happened to the requests before it; each is sent by a goroutine of
its own, and its latency is measured from the time it was due, so waiting
that the schedule forced on it counts (no coordinated omission). At most
--max-in-flight requests are outstanding; a request that finds that many
when it is due, or becomes due while the generator waits for a free slot,
is sent as soon as one frees and counted as late; requests still waiting
when the schedule ends are not sent and counted as dropped. The report has
the target and the achieved rate, late, dropped and the generator's own
send lag (time from due to sent). Open loop works for uniform, hot and
mixed.

Latency percentiles are exact (every sample is kept, nearest-rank). Requests
of the --warmup period are excluded from the statistics. --seed fixes every
client's random sequence (in open loop: every request's), so runs are
comparable.

The audit lists every calendar's bookings (following next_cursor) and fails
when two confirmed bookings overlap, a booking answered 201 is missing, or a
booking cancelled with 200 is still listed (mixed). Exit status 1 when the
audit fails.`

type benchConfig struct {
	url             string
	natsURL         string
	scenario        string
	clients         int
	calendars       int
	days            int
	duration        time.Duration
	requests        int
	warmup          time.Duration
	seed            uint64
	jsonOut         bool
	createCalendars bool
	prefix          string
	apiKey          string
	timeout         time.Duration
	rate            float64 // requests per second; 0 = closed loop
	maxInFlight     int     // open loop: bound on outstanding requests
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c benchConfig
	fs := newFlagSet("bench", stderr, benchSummary)
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "base URL of the server under test")
	fs.StringVar(&c.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL for --scenario import")
	fs.StringVar(&c.scenario, "scenario", "uniform", "uniform, hot, mixed or import")
	fs.IntVar(&c.clients, "clients", 64, "concurrent clients of the closed loop (import: publishes in flight = 16 x clients; with --rate: only how many calendars are created at once)")
	fs.IntVar(&c.calendars, "calendars", 0, "calendars to spread the load over; 0 = 100 (uniform, mixed), 1 (hot), 1000 (import)")
	fs.IntVar(&c.days, "days", 0, "days of the booking horizon per calendar, from 2030-01-01; 0 = 365 (hot: 1)")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured duration (after the warm-up); ignored when --requests is set")
	fs.IntVar(&c.requests, "requests", 0, "stop after this many measured requests instead of after --duration (import: commands to publish, default 100000)")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "load before measuring, excluded from the statistics")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed; the same seed gives every client the same sequence")
	fs.BoolVar(&c.jsonOut, "json", false, "print the result as one JSON object")
	fs.BoolVar(&c.createCalendars, "create-calendars", true, "PUT every calendar before the run")
	fs.StringVar(&c.prefix, "calendar-prefix", "bench", "calendar ids are <prefix>-<n>; use a new prefix for a run on fresh calendars")
	fs.StringVar(&c.apiKey, "api-key", "", "API key sent as Authorization: Bearer (when the target requires one)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "per-request timeout")
	fs.Float64Var(&c.rate, "rate", 0, "open loop: requests per second on a fixed schedule, latency measured from each request's due time; 0 = closed loop with --clients")
	fs.IntVar(&c.maxInFlight, "max-in-flight", 0, "open loop: most requests outstanding at once (each needs a connection); 0 = one second's worth at --rate, at least 64")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.normalise(); err != nil {
		return err
	}
	res, err := runBenchScenario(ctx, c)
	if err != nil {
		return err
	}
	if c.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		printBenchResult(stdout, res)
	}
	if !res.Audit.OK {
		return fmt.Errorf("audit failed: %s", strings.Join(res.Audit.Problems, "; "))
	}
	return nil
}

func (c *benchConfig) normalise() error {
	switch c.scenario {
	case "uniform", "mixed":
		if c.calendars == 0 {
			c.calendars = 100
		}
	case "hot":
		if c.calendars == 0 {
			c.calendars = 1
		}
		if c.days == 0 {
			c.days = 1
		}
	case "import":
		if c.calendars == 0 {
			c.calendars = 1000
		}
		if c.requests == 0 {
			c.requests = 100000
		}
	default:
		return fmt.Errorf("--scenario %q: want uniform, hot, mixed or import", c.scenario)
	}
	if c.days == 0 {
		c.days = 365
	}
	switch {
	case c.clients < 1:
		return errors.New("--clients must be at least 1")
	case c.calendars < 1:
		return errors.New("--calendars must be at least 1")
	case c.days < 1:
		return errors.New("--days must be at least 1")
	case c.requests < 0:
		return errors.New("--requests must not be negative")
	case c.requests == 0 && c.duration <= 0:
		return errors.New("--duration must be positive (or set --requests)")
	case c.warmup < 0:
		return errors.New("--warmup must not be negative")
	case c.timeout <= 0:
		return errors.New("--timeout must be positive")
	case c.rate < 0 || math.IsNaN(c.rate) || math.IsInf(c.rate, 0):
		return errors.New("--rate must be a non-negative number of requests per second")
	case c.rate > 0 && c.scenario == "import":
		return errors.New("--rate applies to uniform, hot and mixed, not import")
	case c.maxInFlight < 0:
		return errors.New("--max-in-flight must not be negative")
	}
	if c.rate > 0 && c.maxInFlight == 0 {
		c.maxInFlight = max(64, int(math.Ceil(c.rate)))
	}
	if !actor.ValidCalendarID(c.calendarID(c.calendars - 1)) {
		return fmt.Errorf("--calendar-prefix %q: calendar ids must match [A-Za-z0-9_-]{1,64}", c.prefix)
	}
	if _, err := url.Parse(c.url); err != nil || !strings.HasPrefix(c.url, "http") {
		return fmt.Errorf("--url %q: want http://host:port", c.url)
	}
	c.url = strings.TrimRight(c.url, "/")
	return nil
}

func (c *benchConfig) calendarID(i int) string { return c.prefix + "-" + strconv.Itoa(i) }

// benchEpoch is the start of every booking horizon: far enough in the future
// that no real booking is near it.
var benchEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const slot = 15 * time.Minute

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
	Audit    AuditResult    `json:"audit"`
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

// AuditResult is what the audit found through the API.
type AuditResult struct {
	OK        bool `json:"ok"`
	Calendars int  `json:"calendars"`
	// Listed confirmed bookings on the run's calendars (earlier runs' too).
	Listed int `json:"listed"`
	// Expected is the number of bookings the run saw created (201, or
	// accepted for import) and not cancelled; Missing of them were not listed.
	Expected         int      `json:"expected"`
	Missing          int      `json:"missing"`
	Overlaps         int      `json:"overlaps"`
	CancelledListed  int      `json:"cancelled_listed"`
	NotConfirmed     int      `json:"not_confirmed"`
	Problems         []string `json:"problems,omitempty"`
	DurationSeconds  float64  `json:"seconds"`
	ImportedAccepted int      `json:"import_accepted,omitempty"`
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

// benchState is what a client knows of its own bookings, which later
// requests (mixed) and the audit use.
type benchState struct {
	customer string
	created  map[string]map[string]bool // calendar -> booking ids answered 201 (all phases)
	live     []ownBooking               // own confirmed bookings, for cancel and get
	cancel   map[string]map[string]bool // calendar -> booking ids cancelled with 200
}

func newBenchState(customer string) benchState {
	return benchState{customer: customer, created: map[string]map[string]bool{}, cancel: map[string]map[string]bool{}}
}

// benchClient is one simulated client of the closed loop. Its fields are its
// own until the run ends; the run merges them afterwards.
type benchClient struct {
	id  int
	rng *rand.Rand
	benchState
	samples map[string][]time.Duration // op -> latencies (measured only)
	status  map[string]map[string]int  // op -> status -> count (measured only)
	buf     []byte
}

// count records one measured answer.
func (cl *benchClient) count(op, status string, latency time.Duration) {
	cl.samples[op] = append(cl.samples[op], latency)
	m := cl.status[op]
	if m == nil {
		m = map[string]int{}
		cl.status[op] = m
	}
	m[status]++
}

type ownBooking struct{ cal, id string }

type benchRun struct {
	c        benchConfig
	hc       *fasthttp.Client
	measure  atomic.Int64 // unix nanos when measuring starts
	stopAt   atomic.Int64 // unix nanos when no new request starts; 0 = not set
	budget   atomic.Int64 // measured requests left (--requests)
	lastDone atomic.Int64 // unix nanos of the last measured completion
}

// newBenchHTTPClient is fasthttp's client rather than net/http's: the
// generator shares the machine with the server it measures, and net/http's
// client took about a quarter of the CPU at 5k requests/s, CPU the server
// under test then did not have (both targets are driven the same way).
// Every outstanding request needs a connection of its own (HTTP/1.1), so
// the pool is as large as the load can have in flight, and the audit's 16
// on top.
func newBenchHTTPClient(c benchConfig) *fasthttp.Client {
	conns := c.clients
	if c.rate > 0 {
		conns = c.maxInFlight
	}
	return &fasthttp.Client{
		Name:                          "bookline-bench",
		MaxConnsPerHost:               conns + 16,
		MaxIdleConnDuration:           90 * time.Second,
		ReadTimeout:                   c.timeout,
		WriteTimeout:                  c.timeout,
		Dial:                          (&fasthttp.TCPDialer{}).Dial,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
	}
}

func runBenchScenario(ctx context.Context, c benchConfig) (*BenchResult, error) {
	if c.scenario == "import" {
		return runImportBench(ctx, c)
	}
	r := &benchRun{c: c, hc: newBenchHTTPClient(c)}
	defer r.hc.CloseIdleConnections()
	if c.createCalendars {
		if err := r.createCalendars(ctx); err != nil {
			return nil, err
		}
	}
	var (
		clients   []*benchClient
		measureAt time.Time
		open      *OpenLoopStats
	)
	if c.rate > 0 {
		clients, measureAt, open = r.runOpen(ctx)
	} else {
		clients, measureAt = r.runClosed(ctx)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := r.summarise(clients, measureAt)
	res.OpenLoop = open
	if open != nil {
		res.Mode = "open"
		open.AchievedPerS = res.Throughput
	}
	created := map[string]map[string]bool{}
	cancelled := map[string]map[string]bool{}
	for _, cl := range clients {
		mergeSets(created, cl.created)
		mergeSets(cancelled, cl.cancel)
	}
	res.Audit = r.audit(ctx, created, cancelled)
	return res, nil
}

// runClosed runs the closed loop: --clients clients, each sending its next
// request when the previous one is answered.
func (r *benchRun) runClosed(ctx context.Context) ([]*benchClient, time.Time) {
	c := r.c
	clients := make([]*benchClient, c.clients)
	for i := range clients {
		clients[i] = &benchClient{
			id:         i,
			rng:        rand.New(rand.NewPCG(c.seed, uint64(i)+1)),
			benchState: newBenchState("bench-client-" + strconv.Itoa(i)),
			samples:    map[string][]time.Duration{},
			status:     map[string]map[string]int{},
		}
	}
	start := time.Now()
	measureAt := start.Add(c.warmup)
	r.measure.Store(measureAt.UnixNano())
	if c.requests > 0 {
		r.budget.Store(int64(c.requests))
	} else {
		r.stopAt.Store(measureAt.Add(c.duration).UnixNano())
	}
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.loop(ctx, cl)
		}()
	}
	wg.Wait()
	return clients, measureAt
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

func mergeSets(dst, src map[string]map[string]bool) {
	for cal, ids := range src {
		d := dst[cal]
		if d == nil {
			d = map[string]bool{}
			dst[cal] = d
		}
		for id := range ids {
			d[id] = true
		}
	}
}

// forEach runs fn for 0..n-1 on up to par goroutines and returns the first error.
func forEach(ctx context.Context, n, par int, fn func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(par, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

func (r *benchRun) createCalendars(ctx context.Context) error {
	return forEach(ctx, r.c.calendars, r.c.clients, func(i int) error {
		id := r.c.calendarID(i)
		st, body, err := r.do(ctx, http.MethodPut, "/v1/calendars/"+id, []byte(`{"name":"`+id+`","timezone":"UTC"}`))
		if err != nil {
			return fmt.Errorf("create calendar %s: %w", id, err)
		}
		if st != http.StatusCreated && st != http.StatusOK {
			return fmt.Errorf("create calendar %s: status %d: %s", id, st, body)
		}
		return nil
	})
}

// do sends one request and reads the whole answer.
func (r *benchRun) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(r.c.url + path)
	req.Header.SetMethod(method)
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
	}
	if r.c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.c.apiKey)
	}
	if err := r.hc.DoTimeout(req, resp, r.c.timeout); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), bytes.Clone(resp.Body()), nil
}

// next reports whether the client may start another request and whether it
// is measured.
func (r *benchRun) next(now int64) (goOn, measured bool) {
	measured = now >= r.measure.Load()
	if stop := r.stopAt.Load(); stop != 0 {
		return now < stop, measured
	}
	if !measured {
		return true, false
	}
	return r.budget.Add(-1) >= 0, true
}

func (r *benchRun) loop(ctx context.Context, cl *benchClient) {
	for ctx.Err() == nil {
		t0 := time.Now()
		ok, measured := r.next(t0.UnixNano())
		if !ok {
			return
		}
		req := r.plan(cl.rng, &cl.benchState, cl.buf[:0])
		cl.buf = req.body
		st, body, err := r.do(ctx, req.method, req.path, req.body)
		r.record(&cl.benchState, &req, st, body, err)
		if !measured {
			continue
		}
		t1 := time.Now()
		cl.count(req.op, statusString(st, err), t1.Sub(t0))
		r.doneAt(t1)
	}
}

// doneAt notes a measured answer at t: the measured window ends at the last.
func (r *benchRun) doneAt(t time.Time) {
	for { // lastDone = max(lastDone, t)
		last := r.lastDone.Load()
		if t.UnixNano() <= last || r.lastDone.CompareAndSwap(last, t.UnixNano()) {
			return
		}
	}
}

// benchRequest is one operation of a scenario, planned before it is sent.
type benchRequest struct {
	op     string // "book", "cancel", "list" or "get"
	method string
	path   string
	body   []byte
	cal    string
	own    ownBooking // the booking cancelled or read
}

// plan draws the next operation of the scenario from rng and st; a booking's
// body is appended to buf. A cancel takes its booking out of st.live at
// once, so that no other request of an open loop cancels it too; record
// puts it back if the cancel fails.
func (r *benchRun) plan(rng *rand.Rand, st *benchState, buf []byte) benchRequest {
	if r.c.scenario == "mixed" {
		switch p := rng.IntN(100); {
		case p < 15 && len(st.live) > 0:
			i := rng.IntN(len(st.live))
			b := st.live[i]
			st.live[i] = st.live[len(st.live)-1]
			st.live = st.live[:len(st.live)-1]
			return benchRequest{op: "cancel", method: http.MethodDelete, path: "/v1/calendars/" + b.cal + "/bookings/" + b.id, cal: b.cal, own: b}
		case p < 30 && len(st.live) > 0:
			b := st.live[rng.IntN(len(st.live))]
			return benchRequest{op: "get", method: http.MethodGet, path: "/v1/calendars/" + b.cal + "/bookings/" + b.id, cal: b.cal, own: b}
		case p < 50:
			cal := r.c.calendarID(rng.IntN(r.c.calendars))
			from := benchEpoch.Add(time.Duration(rng.IntN(r.c.days)) * 24 * time.Hour)
			q := "?from=" + from.Format(time.RFC3339) + "&to=" + from.Add(24*time.Hour).Format(time.RFC3339) + "&limit=100"
			return benchRequest{op: "list", method: http.MethodGet, path: "/v1/calendars/" + cal + "/bookings" + q, cal: cal}
		}
	}
	cal := r.c.calendarID(rng.IntN(r.c.calendars))
	start, end := r.interval(rng)
	b := append(buf, `{"start":"`...)
	b = start.AppendFormat(b, time.RFC3339)
	b = append(b, `","end":"`...)
	b = end.AppendFormat(b, time.RFC3339)
	b = append(b, `","customer":"`...)
	b = append(b, st.customer...)
	b = append(b, `"}`...)
	return benchRequest{op: "book", method: http.MethodPost, path: "/v1/calendars/" + cal + "/bookings", body: b, cal: cal}
}

// record applies an answer to st: bookings answered 201 are expected in the
// audit (and, in mixed, may be cancelled or read later), bookings cancelled
// with 200 must be gone.
func (r *benchRun) record(st *benchState, req *benchRequest, status int, body []byte, err error) {
	switch req.op {
	case "book":
		if err != nil || status != http.StatusCreated {
			return
		}
		var bk struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(body, &bk) != nil || bk.ID == "" {
			return
		}
		addToSet(st.created, req.cal, bk.ID)
		if r.c.scenario == "mixed" {
			st.live = append(st.live, ownBooking{req.cal, bk.ID})
		}
	case "cancel":
		if err != nil || status != http.StatusOK {
			st.live = append(st.live, req.own)
			return
		}
		delete(st.created[req.cal], req.own.id)
		addToSet(st.cancel, req.cal, req.own.id)
	}
}

func addToSet(sets map[string]map[string]bool, cal, id string) {
	set := sets[cal]
	if set == nil {
		set = map[string]bool{}
		sets[cal] = set
	}
	set[id] = true
}

func statusString(st int, err error) string {
	if err != nil {
		return "error"
	}
	return strconv.Itoa(st)
}

// interval draws a random [start, end) on the 15-minute grid, 15..120 minutes.
func (r *benchRun) interval(rng *rand.Rand) (time.Time, time.Time) {
	slots := r.c.days * 96
	n := 1 + rng.IntN(8)
	s := rng.IntN(max(slots-n, 1))
	start := benchEpoch.Add(time.Duration(s) * slot)
	return start, start.Add(time.Duration(n) * slot)
}

type listedBooking struct {
	ID     string    `json:"id"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Status string    `json:"status"`
}

// listAll lists every booking of cal, following next_cursor.
func (r *benchRun) listAll(ctx context.Context, cal string) ([]listedBooking, error) {
	var all []listedBooking
	cursor := ""
	for page := 0; ; page++ {
		path := "/v1/calendars/" + cal + "/bookings?limit=1000"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		st, body, err := r.do(ctx, http.MethodGet, path, nil)
		if err != nil {
			return nil, err
		}
		if st != http.StatusOK {
			return nil, fmt.Errorf("list %s: status %d: %.200s", cal, st, body)
		}
		var resp struct {
			Bookings   []listedBooking `json:"bookings"`
			NextCursor *string         `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &resp); err != nil {
			return nil, fmt.Errorf("list %s: %w", cal, err)
		}
		all = append(all, resp.Bookings...)
		if resp.NextCursor == nil || *resp.NextCursor == "" {
			return all, nil
		}
		if page > 100000 {
			return nil, fmt.Errorf("list %s: more than 100000 pages", cal)
		}
		cursor = *resp.NextCursor
	}
}

// checkCalendar audits one calendar's listing: every listed booking is
// confirmed, no two overlap, every created one is listed and no cancelled
// one is.
func checkCalendar(cal string, listed []listedBooking, created, cancelled map[string]bool, a *AuditResult, problem func(string, ...any)) {
	a.Listed += len(listed)
	sort.Slice(listed, func(i, j int) bool { return listed[i].Start.Before(listed[j].Start) })
	seen := make(map[string]bool, len(listed))
	var maxEnd time.Time
	var maxID string
	for i, b := range listed {
		seen[b.ID] = true
		if b.Status != "confirmed" {
			a.NotConfirmed++
			problem("%s: listed booking %s has status %q", cal, b.ID, b.Status)
		}
		if i > 0 && b.Start.Before(maxEnd) {
			a.Overlaps++
			problem("%s: bookings %s and %s overlap", cal, maxID, b.ID)
		}
		if b.End.After(maxEnd) {
			maxEnd, maxID = b.End, b.ID
		}
		if cancelled[b.ID] {
			a.CancelledListed++
			problem("%s: cancelled booking %s is still listed", cal, b.ID)
		}
	}
	for id := range created {
		a.Expected++
		if !seen[id] {
			a.Missing++
			problem("%s: booking %s was answered 201 but is not listed", cal, id)
		}
	}
}

// audit checks the target through its API; created and cancelled map
// calendar -> booking ids.
func (r *benchRun) audit(ctx context.Context, created, cancelled map[string]map[string]bool) AuditResult {
	t0 := time.Now()
	a := AuditResult{Calendars: r.c.calendars}
	var mu sync.Mutex
	problem := func(format string, args ...any) {
		if len(a.Problems) < 20 {
			a.Problems = append(a.Problems, fmt.Sprintf(format, args...))
		}
	}
	err := forEach(ctx, r.c.calendars, 16, func(i int) error {
		cal := r.c.calendarID(i)
		listed, err := r.listAll(ctx, cal)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		checkCalendar(cal, listed, created[cal], cancelled[cal], &a, problem)
		return nil
	})
	if err != nil {
		problem("audit: %v", err)
	}
	a.OK = len(a.Problems) == 0
	a.DurationSeconds = time.Since(t0).Seconds()
	return a
}

// runImportBench publishes booking.create commands straight to the command
// stream with bookline import's async publisher, in chunks (so a run of
// millions of commands does not hold them all in memory), then audits over
// HTTP.
func runImportBench(ctx context.Context, c benchConfig) (*BenchResult, error) {
	nc, err := queue.Connect(c.natsURL, "bookline-bench")
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", c.natsURL, err)
	}
	defer nc.Close()
	im, err := newImporter(ctx, nc, importConfig{inFlight: 16 * c.clients, wait: c.timeout})
	if err != nil {
		return nil, err
	}
	defer im.close()
	rng := rand.New(rand.NewPCG(c.seed, 0))
	r := &benchRun{c: c, hc: newBenchHTTPClient(c)}
	defer r.hc.CloseIdleConnections()
	// The seed and prefix make the request ids: the same run twice is all
	// duplicates, as with bookline import.
	row := func(i int) (importfile.Row, error) {
		cal := c.calendarID(rng.IntN(c.calendars))
		start, end := r.interval(rng)
		b := actor.BookingSpec{Start: start, End: end, Customer: "bench-import-" + strconv.Itoa(i)}
		ir, bad := importfile.BookingRow(i, cal, b)
		if bad != nil {
			return importfile.Row{}, errors.New(bad.Reason)
		}
		return ir, nil
	}
	if c.createCalendars {
		cals := make([]importfile.Row, c.calendars)
		for i := range cals {
			cals[i].Cmd.CalendarID = c.calendarID(i)
		}
		t := im.run(ctx, importfile.CalendarUpserts(cals), nil)
		if t.failed+t.missing > 0 {
			return nil, fmt.Errorf("creating calendars: %d failed, %d missing", t.failed, t.missing)
		}
	}
	const chunk = 50000
	total := tally{rejected: map[string]int{}}
	start := time.Now()
	for done := 0; done < c.requests && ctx.Err() == nil; done += chunk {
		rows := make([]importfile.Row, 0, min(chunk, c.requests-done))
		for i := done; i < done+cap(rows); i++ {
			ir, err := row(i)
			if err != nil {
				return nil, err
			}
			rows = append(rows, ir)
		}
		t := im.run(ctx, rows, nil)
		total.published += t.published
		total.accepted += t.accepted
		total.dupStream += t.dupStream
		total.dupRecorded += t.dupRecorded
		total.failed += t.failed
		total.missing += t.missing
		for k, v := range t.rejected {
			total.rejected[k] += v
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	el := time.Since(start)
	st := map[string]int{"accepted": total.accepted, "duplicate": total.dupStream + total.dupRecorded,
		"publish_failed": total.failed, "missing": total.missing}
	for k, v := range total.rejected {
		st[k] += v
	}
	decided := total.accepted + total.rejectedTotal() + total.dupStream + total.dupRecorded
	res := &BenchResult{Scenario: c.scenario, URL: c.natsURL, Clients: c.clients, Calendars: c.calendars, Seed: c.seed,
		Seconds: el.Seconds(), Requests: decided, Status: st,
		Ops: map[string]*OpStats{"import": {Count: decided, Status: st}}}
	if res.Seconds > 0 {
		res.Throughput = float64(decided) / res.Seconds
		res.Bookings201PerS = float64(total.accepted) / res.Seconds
	}
	// Accepted ids are not reported per row, so the audit checks overlaps
	// and that at least as many confirmed bookings are listed as were
	// accepted.
	res.Audit = r.audit(ctx, nil, nil)
	res.Audit.ImportedAccepted = total.accepted
	if res.Audit.Listed < total.accepted {
		res.Audit.OK = false
		res.Audit.Problems = append(res.Audit.Problems, fmt.Sprintf("%d bookings accepted but only %d listed", total.accepted, res.Audit.Listed))
	}
	if total.failed+total.missing > 0 {
		res.Audit.OK = false
		res.Audit.Problems = append(res.Audit.Problems, fmt.Sprintf("%d publishes failed, %d outcomes missing", total.failed, total.missing))
	}
	return res, nil
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
