package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/bookline/bookline/actor"
)

// Abusive clients (--abusers): while the scenario runs, each sends the most
// expensive availability query the API accepts, again as soon as it is
// answered: the longest range (62 days), the smallest step that range
// allows, the longest duration (168h), on a calendar open at all times that
// holds --abuse-bookings bookings in the range. Refused with 429, a client
// waits for Retry-After (sending again at once gains it no expensive work,
// only refusals: a flood of cheap requests, which --abuse-ignore-retry-after
// adds). Comparing the scenario's booking latency with and without them
// shows what expensive reads take from the writers.

// AbuseStats are the abusive clients' numbers (measured window only).
type AbuseStats struct {
	Clients  int            `json:"clients"`
	Calendar string         `json:"calendar"`
	Bookings int            `json:"bookings"` // in the queried range
	Query    string         `json:"query"`
	Requests int            `json:"requests"`
	PerS     float64        `json:"per_s"`
	Latency  *LatencyStats  `json:"latency,omitempty"`
	Status   map[string]int `json:"status"`
}

// abuseStep is the smallest whole-minute step whose grid over the longest
// range the API accepts.
func abuseStep() time.Duration {
	step := time.Minute
	for actor.AvailabilityCandidates(benchEpoch, benchEpoch.Add(actor.MaxAvailabilityRange), step) > actor.MaxAvailabilityCandidates {
		step += time.Minute
	}
	return step
}

func (r *benchRun) abuseCalendar() string { return r.c.prefix + "-abuse" }

// abuseQuery is the path of the worst accepted availability query.
func (r *benchRun) abuseQuery() string {
	from := benchEpoch
	to := from.Add(actor.MaxAvailabilityRange)
	return "/v1/calendars/" + r.abuseCalendar() + "/availability?from=" + from.Format(time.RFC3339) +
		"&to=" + to.Format(time.RFC3339) + "&duration=" + actor.MaxBookingDuration.String() + "&step=" + abuseStep().String()
}

// prepareAbuse creates the abusive clients' calendar and books
// --abuse-bookings 10-minute bookings spread evenly over the queried range
// (a booking a previous run made answers 409 and is counted as there).
func (r *benchRun) prepareAbuse(ctx context.Context) error {
	id := r.abuseCalendar()
	st, body, err := r.do(ctx, http.MethodPut, "/v1/calendars/"+id, []byte(`{"name":"`+id+`","timezone":"UTC"}`))
	if err != nil || st != http.StatusCreated && st != http.StatusOK {
		return fmt.Errorf("create calendar %s: status %d %s: %v", id, st, body, err)
	}
	gap := actor.MaxAvailabilityRange / time.Duration(max(r.c.abuseBookings, 1))
	return forEach(ctx, r.c.abuseBookings, r.c.clients, func(i int) error {
		start := benchEpoch.Add(time.Duration(i) * gap).Truncate(time.Minute)
		b := []byte(`{"start":"` + start.Format(time.RFC3339) + `","end":"` + start.Add(10*time.Minute).Format(time.RFC3339) + `","customer":"abuse"}`)
		st, body, err := r.do(ctx, http.MethodPost, "/v1/calendars/"+id+"/bookings", b)
		if err != nil || st != http.StatusCreated && st != http.StatusConflict {
			return fmt.Errorf("book on %s: status %d %s: %v", id, st, body, err)
		}
		return nil
	})
}

// abuser is one abusive client's record.
type abuser struct {
	samples []time.Duration
	status  map[string]int
}

// startAbuse starts the abusive clients; stop ends them and returns their
// numbers over the measured window (from measureAt until stop).
func (r *benchRun) startAbuse(ctx context.Context) (stop func() *AbuseStats) {
	ctx, cancel := context.WithCancel(ctx)
	path := r.abuseQuery()
	abusers := make([]*abuser, r.c.abusers)
	var wg sync.WaitGroup
	for i := range abusers {
		a := &abuser{status: map[string]int{}}
		abusers[i] = a
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.abuse(ctx, i, path, a)
		}()
	}
	return func() *AbuseStats {
		end := time.Now()
		cancel()
		wg.Wait()
		st := &AbuseStats{Clients: r.c.abusers, Calendar: r.abuseCalendar(), Bookings: r.c.abuseBookings, Query: path, Status: map[string]int{}}
		var all []time.Duration
		for _, a := range abusers {
			all = append(all, a.samples...)
			for k, n := range a.status {
				st.Status[k] += n
			}
		}
		st.Requests = len(all)
		st.Latency = latencyStats(all)
		if secs := end.Sub(time.Unix(0, r.measure.Load())).Seconds(); secs > 0 {
			st.PerS = float64(st.Requests) / secs
		}
		return st
	}
}

// abuse sends the query again and again until ctx ends. With
// --abuse-distinct-ips each client names an address of its own in
// X-Forwarded-For (it counts only behind a trusted proxy).
func (r *benchRun) abuse(ctx context.Context, i int, path string, a *abuser) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	for ctx.Err() == nil {
		req.Reset()
		resp.Reset()
		req.SetRequestURI(r.base() + path)
		req.Header.SetMethod(http.MethodGet)
		if r.c.abuseKey != "" {
			req.Header.Set("Authorization", "Bearer "+r.c.abuseKey)
		}
		if r.c.abuseDistinct {
			req.Header.Set("X-Forwarded-For", "198.18."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256))
		}
		t0 := time.Now()
		err := r.hc.DoTimeout(req, resp, r.c.timeout)
		if ctx.Err() != nil {
			return // cut short by the end of the run: not an answer
		}
		if m := r.measure.Load(); m != 0 && t0.UnixNano() >= m {
			a.samples = append(a.samples, time.Since(t0))
			a.status[statusString(resp.StatusCode(), err)]++
		}
		pause := time.Duration(0)
		switch {
		case err != nil:
			pause = 10 * time.Millisecond // a refused connection must not spin
		case resp.StatusCode() == http.StatusTooManyRequests && !r.c.abuseFlood:
			secs, _ := strconv.Atoi(string(resp.Header.Peek("Retry-After")))
			pause = time.Duration(max(secs, 1)) * time.Second
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}
