package main

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// OpenLoopStats is an open-loop run's account of its schedule. Counts are of
// the measured window (requests due after the warm-up).
type OpenLoopStats struct {
	TargetPerS float64 `json:"target_per_s"`
	// AchievedPerS is the rate of measured answers (req_per_s); SentPerS
	// the rate at which measured requests were sent, over the window the
	// schedule gave them.
	AchievedPerS float64 `json:"achieved_per_s"`
	SentPerS     float64 `json:"sent_per_s"`
	Scheduled    int     `json:"scheduled"`
	Sent         int     `json:"sent"`
	// Late requests could not be sent when due because MaxInFlight
	// requests were outstanding: they waited for a free slot, or became
	// due while the generator waited for one. Their latency still counts
	// from the time they were due.
	Late int `json:"late"`
	// Dropped requests were still waiting for a free slot when the
	// schedule ended and were never sent (not in the latency figures).
	Dropped      int `json:"dropped"`
	MaxInFlight  int `json:"max_in_flight"`
	PeakInFlight int `json:"peak_in_flight"`
	// SendLag is the time from due to sent of the measured requests: the
	// generator's own punctuality (late requests included).
	SendLag *LatencyStats `json:"send_lag"`
}

// openLoop is the timetable of an open-loop run: request i is due at
// start + i/rate, whatever happened to the requests before it. run sends
// each request on a goroutine of its own, so a slow answer never holds up
// the next request, and measures its latency from the time it was due.
type openLoop struct {
	start       time.Time
	rate        float64 // requests per second
	n           int     // requests in the timetable
	maxInFlight int

	// Filled by run: results[i] for every request sent, sent the number
	// sent (requests sent..n-1 were dropped), peak the most outstanding.
	results []openResult
	sent    int
	peak    int
	// late counts late requests as they happen, and dispatched is closed
	// when no further request will be sent (tests watch both).
	late       atomic.Int64
	dispatched chan struct{}
}

func newOpenLoop(start time.Time, rate float64, n, maxInFlight int) *openLoop {
	return &openLoop{start: start, rate: rate, n: n, maxInFlight: maxInFlight,
		results: make([]openResult, n), dispatched: make(chan struct{})}
}

// openResult is one request's outcome.
type openResult struct {
	sent    bool
	late    bool
	op      string
	status  string
	latency time.Duration // answered - due
	lag     time.Duration // sent - due
	done    int64         // unix nanos of the answer
}

// due is the time request i is due.
func (o *openLoop) due(i int) time.Time {
	return o.start.Add(time.Duration(float64(i) * float64(time.Second) / o.rate))
}

// run sends every request of the timetable with send, which returns the
// operation and the answer's status, and returns when all sent requests are
// answered or ctx is done; run it once. No request is sent after the timetable's end
// (the due time of request n): one still waiting for a slot then is dropped.
func (o *openLoop) run(ctx context.Context, send func(i int) (op, status string)) {
	slots := make(chan struct{}, o.maxInFlight)
	end := o.due(o.n)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var wg sync.WaitGroup
	var inFlight atomic.Int64
	var peak int64
	// blockedUntil is when the dispatcher last stopped waiting for a slot:
	// a request due before it could not be sent on time either.
	var blockedUntil time.Time
dispatch:
	for i := range o.n {
		due := o.due(i)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break dispatch
			}
		}
		late := due.Before(blockedUntil)
		select {
		case slots <- struct{}{}:
			if late {
				o.late.Add(1)
			}
		default:
			late = true
			o.late.Add(1)
			timer.Reset(time.Until(end))
			select {
			case slots <- struct{}{}:
			case <-timer.C:
				break dispatch
			case <-ctx.Done():
				break dispatch
			}
			blockedUntil = time.Now()
		}
		o.results[i].late = late
		if n := inFlight.Add(1); n > peak {
			peak = n // only the dispatcher raises it
		}
		o.sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			sentAt := time.Now()
			op, status := send(i)
			doneAt := time.Now()
			inFlight.Add(-1)
			<-slots
			r := &o.results[i]
			r.sent, r.op, r.status = true, op, status
			r.latency, r.lag, r.done = doneAt.Sub(due), sentAt.Sub(due), doneAt.UnixNano()
		}()
	}
	close(o.dispatched)
	wg.Wait()
	o.peak = int(peak)
}

// requestSeed spreads consecutive request numbers over the generator's
// seed space (splitmix64's finaliser), so each request's random sequence
// is its own and does not depend on the order the goroutines run in.
func requestSeed(i int) uint64 {
	z := uint64(i) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// runOpen runs the open loop at --rate and returns its answers as one
// client's (for summarise and the audit), the start of the measured window
// and the schedule's account.
func (r *benchRun) runOpen(ctx context.Context) ([]*benchClient, time.Time, *OpenLoopStats) {
	c := r.c
	warm := int(math.Ceil(c.rate * c.warmup.Seconds()))
	measured := c.requests
	if measured == 0 {
		measured = int(math.Ceil(c.rate * c.duration.Seconds()))
	}
	o := newOpenLoop(time.Now(), c.rate, warm+measured, c.maxInFlight)
	r.measure.Store(o.due(warm).UnixNano()) // for the abusive clients
	// One state for the whole run: requests are not a client's, and in
	// mixed any request may cancel or read a booking another one made.
	var mu sync.Mutex
	st := newBenchState("bench-open")
	o.run(ctx, func(i int) (string, string) {
		rng := rand.New(rand.NewPCG(c.seed, requestSeed(i)))
		mu.Lock()
		req := r.plan(rng, &st, nil)
		mu.Unlock()
		status, body, err := r.do(ctx, req.method, req.path, req.body)
		mu.Lock()
		r.record(&st, &req, status, body, err)
		mu.Unlock()
		return req.op, statusString(status, err)
	})

	cl := &benchClient{benchState: st, samples: map[string][]time.Duration{}, status: map[string]map[string]int{}}
	stats := &OpenLoopStats{TargetPerS: c.rate, Scheduled: measured, MaxInFlight: c.maxInFlight, PeakInFlight: o.peak}
	var lags []time.Duration
	for i := warm; i < o.n; i++ {
		res := &o.results[i]
		if i >= o.sent { // the dispatcher sends in order: the rest were dropped
			stats.Dropped++
			continue
		}
		stats.Sent++
		if res.late {
			stats.Late++
		}
		cl.count(res.op, res.status, res.latency)
		lags = append(lags, res.lag)
		r.doneAt(time.Unix(0, res.done))
	}
	stats.SendLag = latencyStats(lags)
	if window := o.due(o.n).Sub(o.due(warm)).Seconds(); window > 0 {
		stats.SentPerS = float64(stats.Sent) / window
	}
	return []*benchClient{cl}, o.due(warm), stats
}
