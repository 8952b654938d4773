package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// runInBackground runs o and returns a channel closed when run returns.
func runInBackground(o *openLoop, send func(i int) (string, string)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.run(context.Background(), send)
	}()
	return done
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A server that does not answer at all must not slow the schedule: every
// request is sent when due while none is answered, none early, and each
// latency runs from the request's due time to its answer.
func TestOpenLoopKeepsScheduleWhileAnswersAreSlow(t *testing.T) {
	const n = 50
	o := newOpenLoop(time.Now(), 1000, n, 100)
	gate := make(chan struct{})
	var started atomic.Int64
	startedAt := make([]time.Time, n)
	done := runInBackground(o, func(i int) (string, string) {
		startedAt[i] = time.Now()
		started.Add(1)
		<-gate
		return "book", "201"
	})
	waitUntil(t, 10*time.Second, "every request sent", func() bool { return started.Load() == n })
	released := time.Now()
	close(gate)
	waitClosed(t, done, "the run")

	if o.sent != n || o.late.Load() != 0 || o.peak != n {
		t.Fatalf("sent %d, late %d, peak %d; want %d, 0, %d", o.sent, o.late.Load(), o.peak, n, n)
	}
	for i, r := range o.results {
		if startedAt[i].Before(o.due(i)) {
			t.Errorf("request %d sent %v before it was due", i, o.due(i).Sub(startedAt[i]))
		}
		if !r.sent || r.late || r.op != "book" || r.status != "201" {
			t.Errorf("request %d: %+v", i, r)
		}
		if min := released.Sub(o.due(i)); r.latency < min {
			t.Errorf("request %d: latency %v, but it was due %v before the server answered", i, r.latency, min)
		}
		if r.lag < 0 || r.lag > r.latency {
			t.Errorf("request %d: send lag %v, latency %v", i, r.lag, r.latency)
		}
	}
}

// With the in-flight bound reached, a due request waits for a slot and is
// late, and so is one that becomes due meanwhile; their latency includes
// that wait, because it runs from the due time, not from the send.
func TestOpenLoopLateRequestsCountFromTheirDueTime(t *testing.T) {
	// The release must come after request 2 is due and before the
	// schedule ends (due(3)), when request 1 would be dropped: at one
	// request per second that window is a second, not the millisecond
	// that a loaded machine missed at 1000/s.
	o := newOpenLoop(time.Now(), 1, 3, 1)
	gate := make(chan struct{})
	var sentAt [3]time.Time
	done := runInBackground(o, func(i int) (string, string) {
		sentAt[i] = time.Now()
		if i == 0 {
			<-gate
		}
		return "book", "201"
	})
	// Request 1 waits for request 0's slot, and request 2 is due too.
	waitUntil(t, 10*time.Second, "request 1 waiting and request 2 due", func() bool {
		return o.late.Load() == 1 && time.Now().After(o.due(2))
	})
	released := time.Now()
	close(gate)
	waitClosed(t, done, "the run")

	if o.sent != 3 || o.late.Load() != 2 || o.peak != 1 {
		t.Fatalf("sent %d, late %d, peak %d; want 3, 2, 1", o.sent, o.late.Load(), o.peak)
	}
	if o.results[0].late || !o.results[1].late || !o.results[2].late {
		t.Fatalf("late flags %v %v %v, want false true true", o.results[0].late, o.results[1].late, o.results[2].late)
	}
	for i := 1; i < 3; i++ {
		r := o.results[i]
		wait := released.Sub(o.due(i))
		if sentAt[i].Before(released) || r.lag < wait || r.latency < r.lag {
			t.Errorf("request %d: sent %v after release, lag %v, latency %v; it waited at least %v", i, sentAt[i].Sub(released), r.lag, r.latency, wait)
		}
	}
}

// A request still waiting for a slot when the schedule ends is not sent.
func TestOpenLoopDropsWhatTheScheduleEndsOn(t *testing.T) {
	o := newOpenLoop(time.Now(), 1000, 3, 1)
	gate := make(chan struct{})
	var calls atomic.Int64
	done := runInBackground(o, func(i int) (string, string) {
		calls.Add(1)
		<-gate
		return "book", "201"
	})
	waitClosed(t, o.dispatched, "the end of dispatching")
	close(gate)
	waitClosed(t, done, "the run")
	if o.sent != 1 || calls.Load() != 1 || !o.results[0].sent || o.results[1].sent || o.results[2].sent {
		t.Fatalf("sent %d, calls %d, results %+v", o.sent, calls.Load(), o.results)
	}
}

// slowBookingServer is a fake target for the open loop: it holds every
// booking's answer until release is closed, refuses overlaps (409) like the
// real targets, and lists what it accepted, so the audit can run.
type slowBookingServer struct {
	release  chan struct{}
	mu       sync.Mutex
	pending  int
	peak     int
	first    time.Time // the first booking's arrival
	bookings map[string][]listedBooking
}

func (s *slowBookingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // v1 calendars {cal} [bookings]
	if len(parts) < 3 {
		http.NotFound(w, r)
		return
	}
	cal := parts[2]
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPut && len(parts) == 3:
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"` + cal + `"}`))
	case r.Method == http.MethodGet && len(parts) == 4:
		s.mu.Lock()
		list := append([]listedBooking{}, s.bookings[cal]...)
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"bookings": list, "next_cursor": nil})
	case r.Method == http.MethodPost && len(parts) == 4:
		var b listedBooking
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		if s.first.IsZero() {
			s.first = time.Now()
		}
		s.pending++
		s.peak = max(s.peak, s.pending)
		s.mu.Unlock()
		<-s.release
		s.mu.Lock()
		defer s.mu.Unlock()
		s.pending--
		for _, o := range s.bookings[cal] {
			if o.Start.Before(b.End) && b.Start.Before(o.End) {
				w.WriteHeader(http.StatusConflict)
				_, _ = w.Write([]byte(`{"error":{"code":"slot_taken"}}`))
				return
			}
		}
		b.ID, b.Status = cal+"-"+strconv.Itoa(len(s.bookings[cal])), "confirmed"
		s.bookings[cal] = append(s.bookings[cal], b)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(b)
	default:
		http.NotFound(w, r)
	}
}

func (s *slowBookingServer) state() (pending, peak int, first time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending, s.peak, s.first
}

// The whole open loop against a server that answers nothing for a while:
// at most --max-in-flight requests reach it, the others wait in the
// generator and are late, every request is still sent (the server recovers
// before the schedule ends), and the latencies count the time the server
// made them wait, from each request's due time.
func TestOpenLoopBenchAgainstSlowServer(t *testing.T) {
	srv := &slowBookingServer{release: make(chan struct{}), bookings: map[string][]listedBooking{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer func() {
		select {
		case <-srv.release:
		default:
			close(srv.release)
		}
	}()

	// A schedule that a loaded machine can keep after the stall: at
	// 500/s over one second, requests were dropped when the release came
	// late or the catch-up was slow.
	const rate, maxInFlight, n = 100.0, 10, 300 // due over 2.99 s
	stall := 200 * time.Millisecond
	c := benchConfig{url: ts.URL, scenario: "uniform", clients: 4, calendars: 3, days: 30, duration: 3 * time.Second,
		seed: 1, createCalendars: true, prefix: "slow", timeout: 10 * time.Second, rate: rate, maxInFlight: maxInFlight}
	if err := c.normalise(); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res *BenchResult
		err error
	}
	out := make(chan outcome, 1)
	go func() {
		res, err := runBenchScenario(context.Background(), c)
		out <- outcome{res, err}
	}()
	// The first 10 requests wait at the server, the ones due after them
	// in the generator, until the server answers again.
	waitUntil(t, 10*time.Second, "the bound reached and the stall over", func() bool {
		pending, _, first := srv.state()
		return pending == maxInFlight && time.Since(first) > stall
	})
	_, _, first := srv.state()
	released := time.Now()
	close(srv.release)
	var o outcome
	select {
	case o = <-out:
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting for the bench")
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	res := o.res
	ol := res.OpenLoop
	if res.Mode != "open" || ol == nil || ol.TargetPerS != rate || ol.MaxInFlight != maxInFlight {
		t.Fatalf("mode %q, open loop %+v", res.Mode, ol)
	}
	if ol.Scheduled != n || ol.Sent != n || ol.Dropped != 0 || res.Requests != n {
		t.Errorf("scheduled %d, sent %d, dropped %d, requests %d; want %d, %d, 0, %d", ol.Scheduled, ol.Sent, ol.Dropped, res.Requests, n, n, n)
	}
	if ol.Late < 1 {
		t.Errorf("late %d, want some", ol.Late)
	}
	if _, peak, _ := srv.state(); peak > maxInFlight || ol.PeakInFlight > maxInFlight {
		t.Errorf("in flight at the server %d, by the generator %d; bound %d", peak, ol.PeakInFlight, maxInFlight)
	}
	if ol.AchievedPerS != res.Throughput || ol.SentPerS <= 0 || ol.SendLag == nil {
		t.Errorf("rates %+v, throughput %v", ol, res.Throughput)
	}
	// Requests 0..15 were due by first + 150 ms and answered after the
	// release, so at least 16 of the 300 latencies (more than 5%) are at
	// least released - first - 150 ms: p95 is too. Measured from the send,
	// requests 10..15 would have taken a millisecond or so.
	floor := (released.Sub(first) - 150*time.Millisecond).Seconds() * 1000
	if res.Latency == nil || res.Latency.P95 < floor {
		t.Errorf("latency %+v, want p95 >= %.1f ms (measured from due times)", res.Latency, floor)
	}
	if !res.Audit.OK || res.Audit.Expected == 0 || res.Audit.Missing != 0 {
		t.Errorf("audit %+v", res.Audit)
	}
}

func TestBenchRateFlags(t *testing.T) {
	for _, tc := range []struct {
		c    benchConfig
		want string
	}{
		{benchConfig{scenario: "import", rate: 10}, "--rate"},
		{benchConfig{scenario: "uniform", rate: -1}, "--rate"},
		{benchConfig{scenario: "uniform", rate: 10, maxInFlight: -1}, "--max-in-flight"},
	} {
		c := tc.c
		c.clients, c.duration, c.timeout, c.prefix, c.url = 1, time.Second, time.Second, "p", "http://x"
		if err := c.normalise(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %s", tc.c, err, tc.want)
		}
	}
	c := benchConfig{scenario: "uniform", clients: 1, duration: time.Second, timeout: time.Second, prefix: "p", url: "http://x", rate: 2500.5}
	if err := c.normalise(); err != nil || c.maxInFlight != 2501 {
		t.Errorf("default bound at 2500.5/s: %d, %v; want 2501", c.maxInFlight, err)
	}
	c = benchConfig{scenario: "uniform", clients: 1, duration: time.Second, timeout: time.Second, prefix: "p", url: "http://x", rate: 5}
	if err := c.normalise(); err != nil || c.maxInFlight != 64 {
		t.Errorf("default bound at 5/s: %d, %v; want 64", c.maxInFlight, err)
	}
}

// With several comma-separated --url entries the requests are spread over
// all of them (as over the instances of a cluster), and the audit reads
// through them too: two fronts of one booking store share the load.
func TestBenchSpreadsOverURLs(t *testing.T) {
	srv := &slowBookingServer{release: make(chan struct{}), bookings: map[string][]listedBooking{}}
	close(srv.release)
	var counts [2]atomic.Int64
	var fronts []string
	for i := range counts {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			counts[i].Add(1)
			srv.ServeHTTP(w, r)
		}))
		defer ts.Close()
		fronts = append(fronts, ts.URL+"/")
	}
	c := benchConfig{url: strings.Join(fronts, " , "), scenario: "uniform", clients: 4, calendars: 3, days: 30,
		requests: 200, seed: 1, createCalendars: true, prefix: "spread", timeout: 10 * time.Second}
	if err := c.normalise(); err != nil {
		t.Fatal(err)
	}
	if len(c.urls) != 2 || strings.HasSuffix(c.urls[0], "/") {
		t.Fatalf("urls %q", c.urls)
	}
	res, err := runBenchScenario(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Audit.OK || res.Audit.Listed == 0 {
		t.Fatalf("audit %+v", res.Audit)
	}
	a, b := counts[0].Load(), counts[1].Load()
	if a < 100 || b < 100 || a-b > 2 || b-a > 2 {
		t.Errorf("requests per URL %d and %d: want them spread evenly", a, b)
	}
	bad := benchConfig{url: "http://x,ftp://y", scenario: "uniform", clients: 1, duration: time.Second, timeout: time.Second, prefix: "p"}
	if err := bad.normalise(); err == nil || !strings.Contains(err.Error(), "ftp://y") {
		t.Errorf("a bad second URL: %v", err)
	}
}

// A list answered 503 (a cluster instance that cannot catch up yet) is
// asked again: the audit's verdict comes from the 200 that follows.
func TestBenchAuditRetriesUnavailable(t *testing.T) {
	srv := &slowBookingServer{release: make(chan struct{}), bookings: map[string][]listedBooking{}}
	close(srv.release)
	var refused atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && refused.Add(1) <= 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"unavailable"}}`))
			return
		}
		srv.ServeHTTP(w, r)
	}))
	defer ts.Close()
	c := benchConfig{url: ts.URL, scenario: "uniform", clients: 2, calendars: 1, days: 30,
		requests: 20, seed: 1, createCalendars: true, prefix: "retry", timeout: 10 * time.Second}
	if err := c.normalise(); err != nil {
		t.Fatal(err)
	}
	res, err := runBenchScenario(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Audit.OK || res.Audit.Listed == 0 || refused.Load() < 4 {
		t.Fatalf("audit %+v after %d list requests", res.Audit, refused.Load())
	}
}
