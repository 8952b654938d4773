package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// loadCluster books concurrently through whichever instances are live.
type loadCluster struct {
	mu       sync.Mutex
	live     []*instance
	attempts []*attempt
	stop     atomic.Bool
	wg       sync.WaitGroup
	cals     []string
}

func (l *loadCluster) pick(i int) *instance {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.live {
		if in := l.live[(i+k)%len(l.live)]; !in.dead.Load() {
			return in
		}
	}
	return nil
}

// remove stops sending new requests to in.
func (l *loadCluster) remove(in *instance) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live = slices.DeleteFunc(l.live, func(x *instance) bool { return x == in })
}

func (l *loadCluster) add(in *instance) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live = append(l.live, in)
}

func (l *loadCluster) run(t *testing.T, workers int) {
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 16))
			for i := 0; !l.stop.Load(); i++ {
				in := l.pick(w + i)
				if in == nil {
					return
				}
				a := &attempt{instance: in.id, cal: l.cals[rng.IntN(len(l.cals))], customer: fmt.Sprintf("r%d-%d", w, i)}
				a.start = base.Add(time.Duration(rng.IntN(96)) * 15 * time.Minute)
				a.end = a.start.Add(time.Duration(1+rng.IntN(6)) * 15 * time.Minute)
				a.sentAt = time.Now()
				r, err := in.request("POST", "/v1/calendars/"+a.cal+"/bookings", loadBody(a), "Idempotency-Key", a.customer)
				a.doneAt = time.Now()
				if err == nil {
					readAnswer(t, a, r)
				}
				l.mu.Lock()
				l.attempts = append(l.attempts, a)
				l.mu.Unlock()
			}
		}()
	}
}

func loadBody(a *attempt) map[string]string {
	return map[string]string{"start": a.start.Format(time.RFC3339), "end": a.end.Format(time.RFC3339), "customer": a.customer}
}

// readAnswer records the outcome of a booking request in a.
func readAnswer(t *testing.T, a *attempt, r response) {
	a.status = r.Status
	a.retryAfter = r.Header.Get("Retry-After")
	switch r.Status {
	case http.StatusCreated:
		r.json(t, &a.booking)
	case http.StatusAccepted:
		var p struct {
			RequestID string `json:"request_id"`
		}
		r.json(t, &p)
		a.requestID = p.RequestID
	default:
		var e struct {
			Error struct {
				Code     string                          `json:"code"`
				Conflict *struct{ Start, End time.Time } `json:"conflict"`
			} `json:"error"`
		}
		_ = json.Unmarshal(r.Body, &e)
		a.code, a.conflict = e.Error.Code, e.Error.Conflict
	}
}

func (l *loadCluster) decidedSince(since time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.attempts {
		if !a.sentAt.Before(since) && (a.status == http.StatusCreated || a.status == http.StatusConflict) {
			n++
		}
	}
	return n
}

// redecided is, per partition, how long after at the first request sent
// at or after at was decided (201 or 409).
func (l *loadCluster) redecided(at time.Time) map[int]time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]time.Duration{}
	for _, a := range l.attempts {
		if a.sentAt.Before(at) || a.status != http.StatusCreated && a.status != http.StatusConflict {
			continue
		}
		p := queue.PartitionOf(a.cal, clusterPartitions)
		if d, ok := out[p]; !ok || a.doneAt.Sub(at) < d {
			out[p] = a.doneAt.Sub(at)
		}
	}
	return out
}

// waitMap waits until every instance of ins sees exactly ins as members
// and pulls exactly what the map assigns it; it returns the map.
func waitMap(t *testing.T, ins ...*instance) []string {
	t.Helper()
	var ids []string
	for _, in := range ins {
		ids = append(ids, in.id)
	}
	slices.Sort(ids)
	var m []string
	queuetest.CheckFor(t, 60*time.Second, func() error {
		m = nil
		for _, in := range ins {
			st, _, err := in.node.ClusterStatus(context.Background())
			if err != nil {
				return err
			}
			if !slices.Equal(st.Members, ids) {
				return fmt.Errorf("%s sees %v, want %v", in.id, st.Members, ids)
			}
			if m != nil && !slices.Equal(m, st.Assignment) {
				return fmt.Errorf("%s has map %v, others %v", in.id, st.Assignment, m)
			}
			m = st.Assignment
			if !slices.Equal(st.Consuming, st.Assigned) {
				return fmt.Errorf("%s pulls %v, assigned %v", in.id, st.Consuming, st.Assigned)
			}
		}
		return nil
	})
	return m
}

// TestClusterRebalanceUnderLoad: 24 clients book through the live
// instances of a three-node NATS cluster (R3) while the instances go from
// 3 to 4 (one joins) to 2 (one stops gracefully, one is killed). Every
// membership change moves partitions between instances. Afterwards: no
// overlapping bookings, every 201 listed on every survivor, every 409
// names a real conflicting booking, the same request sent again is
// answered the same way, and every partition decided again after each
// change (how soon is measured against the takeover timeout + 5 s and
// logged).
func TestClusterRebalanceUnderLoad(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("rebalancing under load takes ~1 min")
	}
	nc := queuetest.StartCluster(t, 3)
	urls := nc.URLs()
	ins := []*instance{startClusterInstance(t, urls, "r0"), startClusterInstance(t, urls, "r1"), startClusterInstance(t, urls, "r2")}
	l := &loadCluster{live: slices.Clone(ins)}
	for i := range 16 {
		l.cals = append(l.cals, fmt.Sprintf("hall-%02d", i))
	}
	for i, c := range l.cals {
		r, err := ins[i%3].request("PUT", "/v1/calendars/"+c, map[string]string{"timezone": "Europe/Berlin", "name": c})
		if err != nil || (r.Status != http.StatusCreated && r.Status != http.StatusOK) {
			t.Fatalf("create %s: %v %d %s", c, err, r.Status, r.Body)
		}
	}
	t.Logf("3 instances: map %v", waitMap(t, ins...))
	l.run(t, 24)
	progress := func(since time.Time, n int) {
		t.Helper()
		queuetest.CheckFor(t, 90*time.Second, func() error {
			if got := l.decidedSince(since); got < n {
				return fmt.Errorf("%d bookings decided since %s", got, since.Format(time.TimeOnly))
			}
			return nil
		})
	}
	progress(time.Now(), 200)

	type change struct {
		what string
		at   time.Time
	}
	var changes []change
	// 3 -> 4: the new instance catches up, registers, takes its share.
	joinAt := time.Now()
	r3 := startClusterInstance(t, urls, "r3")
	l.add(r3)
	ins = append(ins, r3)
	m := waitMap(t, ins...)
	t.Logf("4 instances: map %v (settled %s after the start of r3)", m, time.Since(joinAt).Round(time.Millisecond))
	changes = append(changes, change{"r3 joined", joinAt})
	progress(time.Now(), 200)

	// 4 -> 3: r1 stops gracefully (leaves the members, unpins at once).
	leaveAt := time.Now()
	l.remove(ins[1])
	ins[1].stop(t)
	survivors := []*instance{ins[0], ins[2], r3}
	m = waitMap(t, survivors...)
	t.Logf("r1 stopped: map %v (settled %s)", m, time.Since(leaveAt).Round(time.Millisecond))
	changes = append(changes, change{"r1 stopped", leaveAt})
	progress(time.Now(), 200)

	// 3 -> 2: r2 is killed (its entry expires after the takeover timeout).
	killAt := time.Now()
	l.remove(ins[2])
	ins[2].kill()
	survivors = []*instance{ins[0], r3}
	m = waitMap(t, survivors...)
	settled := time.Since(killAt)
	var seen []string
	for _, in := range survivors {
		if st, _, err := in.node.ClusterStatus(context.Background()); err == nil {
			seen = append(seen, fmt.Sprintf("%s saw r2 gone after %s", in.id, st.LastRebalance.Sub(killAt).Round(time.Millisecond)))
		}
	}
	t.Logf("r2 killed: map %v (settled %s; %v)", m, settled.Round(time.Millisecond), seen)
	changes = append(changes, change{"r2 killed", killAt})
	progress(time.Now(), 300)
	l.stop.Store(true)
	l.wg.Wait()

	bound := queue.DefaultTakeoverTimeout + 5*time.Second
	for _, c := range changes {
		re := l.redecided(c.at)
		var worst time.Duration
		for p := range clusterPartitions {
			d, ok := re[p]
			if !ok {
				t.Errorf("%s: partition %d never decided again", c.what, p)
				continue
			}
			worst = max(worst, d)
		}
		t.Logf("REBALANCE %s: every partition decided again within %s (bound %s)", c.what, worst.Round(time.Millisecond), bound)
		// Measured and logged, not asserted (a loaded machine stretches
		// it); that every partition is decided again is asserted above.
		if worst > bound {
			t.Logf("WARNING: %s: %s over the takeover timeout + 5 s", c.what, worst)
		}
	}

	// Resolve the 202s through the request records.
	for _, a := range l.attempts {
		if a.status != http.StatusAccepted {
			continue
		}
		queuetest.CheckFor(t, 30*time.Second, func() error {
			r, err := survivors[0].request("GET", "/v1/calendars/"+a.cal+"/requests/"+a.requestID, nil)
			if err != nil {
				return err
			}
			if r.Status == http.StatusAccepted {
				return fmt.Errorf("request %s still pending", a.requestID)
			}
			readAnswer(t, a, r)
			return nil
		})
	}
	counts := map[int]int{}
	byCustomer := map[string]*attempt{}
	for _, a := range l.attempts {
		counts[a.status]++
		byCustomer[a.customer] = a
		switch a.status {
		case http.StatusCreated, http.StatusConflict:
		case http.StatusServiceUnavailable:
			if a.retryAfter == "" {
				t.Errorf("503 without Retry-After: %+v", a)
			}
		case 0:
			if a.instance != "r1" && a.instance != "r2" {
				t.Errorf("no HTTP answer from live instance %s", a.instance)
			}
		default:
			t.Errorf("unexpected status %d (%s) for %+v", a.status, a.code, a)
		}
		if a.status == http.StatusConflict && a.code != "slot_taken" {
			t.Errorf("409 with code %s", a.code)
		}
	}
	t.Logf("%d requests: %v", len(l.attempts), counts)

	// Listings: identical on the survivors, without overlaps, every 201
	// in them, no booking for a 409.
	for _, cal := range l.cals {
		var ref []booking
		for i, in := range survivors {
			got := in.list(t, cal)
			sort.Slice(got, func(i, j int) bool { return got[i].Start.Before(got[j].Start) })
			for k := 1; k < len(got); k++ {
				if got[k].Start.Before(got[k-1].End) {
					t.Errorf("%s on %s: overlapping bookings %+v and %+v", cal, in.id, got[k-1], got[k])
				}
			}
			if i == 0 {
				ref = got
			} else if !sameBookings(ref, got) {
				t.Errorf("%s: %s and %s list different bookings", cal, survivors[0].id, in.id)
			}
		}
		listed := map[string]booking{}
		for _, b := range ref {
			listed[b.ID] = b
			if a := byCustomer[b.Customer]; a == nil || a.status == http.StatusConflict {
				t.Errorf("%s: booking %s of customer %q answered 409 or unknown", cal, b.ID, b.Customer)
			}
		}
		for _, a := range l.attempts {
			if a.cal != cal {
				continue
			}
			if a.status == http.StatusCreated {
				if b, ok := listed[a.booking.ID]; !ok || !b.Start.Equal(a.start) || !b.End.Equal(a.end) {
					t.Errorf("%s: LOST 201: booking %s (%s) is not listed", cal, a.booking.ID, a.customer)
				}
			}
			if a.status == http.StatusConflict {
				found := false
				for _, b := range ref {
					found = found || a.conflict != nil && b.Start.Equal(a.conflict.Start) && b.End.Equal(a.conflict.End) &&
						b.Start.Before(a.end) && a.start.Before(b.End)
				}
				if !found {
					t.Errorf("%s: 409 for [%s, %s) names no confirmed overlapping booking", cal, a.start, a.end)
				}
			}
		}
	}

	// The same request again, on a survivor: the same answer.
	var twice atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, a := range l.attempts {
		if a.status != http.StatusCreated && a.status != http.StatusConflict {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			again := &attempt{start: a.start, end: a.end, customer: a.customer}
			r, err := survivors[i%2].request("POST", "/v1/calendars/"+a.cal+"/bookings", loadBody(a), "Idempotency-Key", a.customer)
			if err != nil {
				t.Errorf("again %s: %v", a.customer, err)
				return
			}
			readAnswer(t, again, r)
			same := again.status == a.status && again.booking.ID == a.booking.ID
			if a.status == http.StatusConflict {
				same = same && again.conflict != nil && a.conflict != nil && again.conflict.Start.Equal(a.conflict.Start)
			}
			if !same {
				twice.Add(1)
				t.Errorf("request %s answered two ways: %d %s, then %d %s (%s)", a.customer, a.status, a.booking.ID,
					again.status, again.booking.ID, bytes.TrimSpace(r.Body))
			}
		}()
	}
	wg.Wait()
	t.Logf("REBALANCE RESULT: %d requests, %d answered two ways", len(l.attempts), twice.Load())
	// The operator's view of the map.
	r, err := survivors[0].request("GET", "/v1/admin/cluster", nil)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("cluster status: %v %d %s", err, r.Status, r.Body)
	}
	var st queue.ClusterStatus
	r.json(t, &st)
	if !st.Cluster || !slices.Equal(st.Members, []string{"r0", "r3"}) || len(st.Assignment) != clusterPartitions || len(st.Consuming) != clusterPartitions/2 {
		t.Errorf("cluster status of %s: %s", survivors[0].id, r.Body)
	}
	if t.Failed() || testing.Verbose() {
		// What each survivor did at each change of the map.
		for _, in := range survivors {
			for _, line := range strings.Split(in.logs.String(), "\n") {
				if strings.Contains(line, "assignment") || strings.Contains(line, "pulling") || strings.Contains(line, "caught up") || strings.Contains(line, "handed") || strings.Contains(line, "taken over") {
					t.Log(line)
				}
			}
		}
	}
	for _, in := range survivors {
		datatest.CheckInvariants(t, in.node.Store())
	}
}
