package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

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
	also   string     // a collective's second calendar
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
	cal, also := r.c.calendarID(rng.IntN(r.c.calendars)), ""
	path := "/v1/calendars/" + cal + "/bookings"
	b := append(buf, '{')
	if r.c.scenario == "collective" {
		i, j := r.pairs.pick(rng)
		cal, also, path = r.c.calendarID(i), r.c.calendarID(j), "/v1/bookings"
		b = append(b, `"calendar_ids":["`...)
		b = append(b, cal...)
		b = append(b, `","`...)
		b = append(b, also...)
		b = append(b, `"],`...)
	}
	start, end := r.interval(rng)
	b = append(b, `"start":"`...)
	b = start.AppendFormat(b, time.RFC3339)
	b = append(b, `","end":"`...)
	b = end.AppendFormat(b, time.RFC3339)
	b = append(b, `","customer":"`...)
	b = append(b, st.customer...)
	b = append(b, `"}`...)
	return benchRequest{op: "book", method: http.MethodPost, path: path, body: b, cal: cal, also: also}
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
		if req.also != "" { // a collective's part on its other member
			addToSet(st.created, req.also, bk.ID)
		}
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
