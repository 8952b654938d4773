package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/bookline/bookline/actor"
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
  collective
           books one interval on two calendars at once (POST /v1/bookings),
           random intervals as uniform; the two are always in different
           partitions of the target (--partitions, bookline's count), so
           each request is a two-phase commit across two partition writers.
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
mixed and collective.

Latency percentiles are exact (every sample is kept, nearest-rank). Requests
of the --warmup period are excluded from the statistics. --seed fixes every
client's random sequence (in open loop: every request's), so runs are
comparable.

--abusers N adds N abusive clients for the whole run: each sends the most
expensive availability query the API accepts (62 days, the smallest step
allowed, 168h, on a calendar <prefix>-abuse open at all times with
--abuse-bookings bookings in the range), again as soon as it is answered
(after Retry-After when refused with 429, unless
--abuse-ignore-retry-after). Compare the book latency of a run with them against
one without: what expensive reads take from the writers. Their own numbers
are reported apart (not in the scenario's latency).

The audit lists every calendar's bookings (following next_cursor; a page
answered 503 is asked again for up to 5 s) and fails
when two confirmed bookings overlap, a booking answered 201 is missing, or a
booking cancelled with 200 is still listed (mixed), or a collective booking
is confirmed on some of its members only (collective). Exit status 1 when the
audit fails.`

type benchConfig struct {
	url             string
	urls            []string // --url split at commas: requests go to them in turn
	natsURL         string
	natsAuth        natsClientAuth
	scenario        string
	clients         int
	calendars       int
	partitions      int // collective: the target's partition count
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
	abusers         int     // clients hammering the worst availability query
	abuseKey        string
	abuseBookings   int
	abuseDistinct   bool
	abuseFlood      bool
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c benchConfig
	fs := newFlagSet("bench", stderr, benchSummary)
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "base URL of the server under test; several, comma-separated, spread the requests over them in turn (instances of one cluster)")
	fs.StringVar(&c.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL for --scenario import")
	c.natsAuth.flags(fs.StringVar, "importer")
	fs.StringVar(&c.scenario, "scenario", "uniform", "uniform, hot, mixed, collective or import")
	fs.IntVar(&c.clients, "clients", 64, "concurrent clients of the closed loop (import: publishes in flight = 16 x clients; with --rate: only how many calendars are created at once)")
	fs.IntVar(&c.calendars, "calendars", 0, "calendars to spread the load over; 0 = 100 (uniform, mixed), 1 (hot), 1000 (import)")
	fs.IntVar(&c.partitions, "partitions", queue.DefaultPartitions, "collective: the target bookline's partition count (serve --partitions; a new embedded stream has 2); every request's two calendars are in different partitions of it")
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
	fs.IntVar(&c.abusers, "abusers", 0, "abusive clients sending the most expensive availability query the API accepts, back to back, for the whole run (uniform, hot, mixed)")
	fs.StringVar(&c.abuseKey, "abuse-api-key", "", "API key of the abusive clients (a publishable key, to see per-client limits: it must list <prefix>-abuse); default --api-key")
	fs.IntVar(&c.abuseBookings, "abuse-bookings", 5000, "bookings put on the abusive clients' calendar in the queried range before the run")
	fs.BoolVar(&c.abuseFlood, "abuse-ignore-retry-after", false, "abusive clients refused with 429 send again at once instead of waiting for Retry-After (adds a flood of refused requests)")
	fs.BoolVar(&c.abuseDistinct, "abuse-distinct-ips", false, "each abusive client sends X-Forwarded-For with an address of its own (198.18.x.y): distinct clients to a server whose --trusted-proxies lists the generator")
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
	case "uniform", "mixed", "collective":
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
		return fmt.Errorf("--scenario %q: want uniform, hot, mixed, collective or import", c.scenario)
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
	case c.abusers < 0 || c.abuseBookings < 0:
		return errors.New("--abusers and --abuse-bookings must not be negative")
	case c.abusers > 0 && c.scenario == "import":
		return errors.New("--abusers applies to uniform, hot and mixed, not import")
	}
	if c.scenario == "collective" {
		if _, err := newPairPicker(*c); err != nil {
			return err
		}
	}
	if c.abuseKey == "" {
		c.abuseKey = c.apiKey
	}
	if c.rate > 0 && c.maxInFlight == 0 {
		c.maxInFlight = max(64, int(math.Ceil(c.rate)))
	}
	if !actor.ValidCalendarID(c.calendarID(c.calendars - 1)) {
		return fmt.Errorf("--calendar-prefix %q: calendar ids must match [A-Za-z0-9_-]{1,64}", c.prefix)
	}
	c.urls = c.urls[:0]
	for _, u := range strings.Split(c.url, ",") {
		u = strings.TrimSpace(u)
		if _, err := url.Parse(u); err != nil || !strings.HasPrefix(u, "http") {
			return fmt.Errorf("--url %q: want http://host:port (several: comma-separated)", u)
		}
		c.urls = append(c.urls, strings.TrimRight(u, "/"))
	}
	c.url = strings.Join(c.urls, ",")
	return nil
}

func (c *benchConfig) calendarID(i int) string { return c.prefix + "-" + strconv.Itoa(i) }

// benchEpoch is the start of every booking horizon: far enough in the future
// that no real booking is near it.
var benchEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const slot = 15 * time.Minute

type benchRun struct {
	c        benchConfig
	hc       *fasthttp.Client
	measure  atomic.Int64 // unix nanos when measuring starts
	stopAt   atomic.Int64 // unix nanos when no new request starts; 0 = not set
	budget   atomic.Int64 // measured requests left (--requests)
	lastDone atomic.Int64 // unix nanos of the last measured completion
	nextURL  atomic.Uint64
	pairs    *pairPicker // collective only
}

// base is the URL of the next request: the --url entries in turn, as a
// load balancer in front of several instances would spread them.
func (r *benchRun) base() string {
	switch len(r.c.urls) {
	case 0: // a config that was not normalised (tests)
		return r.c.url
	case 1:
		return r.c.urls[0]
	}
	return r.c.urls[(r.nextURL.Add(1)-1)%uint64(len(r.c.urls))]
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
		MaxConnsPerHost:               conns + c.abusers + 16,
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
	if c.scenario == "collective" {
		var err error
		if r.pairs, err = newPairPicker(c); err != nil {
			return nil, err
		}
	}
	if c.createCalendars {
		if err := r.createCalendars(ctx); err != nil {
			return nil, err
		}
	}
	var (
		clients   []*benchClient
		measureAt time.Time
		open      *OpenLoopStats
		abuse     *AbuseStats
	)
	stopAbuse := func() *AbuseStats { return nil }
	if c.abusers > 0 {
		if err := r.prepareAbuse(ctx); err != nil {
			return nil, err
		}
		stopAbuse = r.startAbuse(ctx)
	}
	if c.rate > 0 {
		clients, measureAt, open = r.runOpen(ctx)
	} else {
		clients, measureAt = r.runClosed(ctx)
	}
	abuse = stopAbuse()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := r.summarise(clients, measureAt)
	res.Abuse = abuse
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
	req.SetRequestURI(r.base() + path)
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
