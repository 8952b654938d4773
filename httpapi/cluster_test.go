package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// instance is one bookline process of a cluster: its own index and HTTP
// server, sharing the NATS cluster's stream with the others.
type instance struct {
	id   string
	node *queue.Node
	api  *httpapi.Server
	URL  string
	done chan struct{}
	logs *queuetest.SyncBuffer
	dead atomic.Bool
}

const clusterPartitions = 8

func startClusterInstance(t *testing.T, natsURLs, id string) *instance {
	t.Helper()
	in := &instance{id: id, logs: &queuetest.SyncBuffer{}}
	log := slog.New(slog.NewTextHandler(in.logs, nil))
	node, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), NATSURL: natsURLs, InstanceID: id, Replicas: 3,
		AllowLazySync: true, // about takeovers, not the servers' durability
		Partitions:    clusterPartitions, Logger: log})
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	in.node = node
	in.api = httpapi.New(node, httpapi.Config{ReplyTimeout: 10 * time.Second, Logger: log, Metrics: httpapi.NewMetrics(), Ports: nodePorts(node)})
	in.URL, in.done = serveLoopback(t, in.api)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", id, in.logs.String())
		}
		in.stop(t)
	})
	// Twice the usual: an instance joins while 24 clients book through
	// the others, and catches up every partition first.
	queuetest.CheckFor(t, 2*queuetest.ReadyTimeout, node.Ready)
	return in
}

// stop shuts the instance down cleanly (nothing for a killed one).
func (in *instance) stop(t *testing.T) {
	if in.dead.Swap(true) {
		return
	}
	_ = in.api.App().ShutdownWithTimeout(time.Second)
	<-in.done
	datatest.CheckInvariants(t, in.node.Store())
	if err := in.node.Close(); err != nil {
		t.Errorf("close %s: %v", in.id, err)
	}
}

// kill simulates the death of the process: its NATS connection drops at
// once (no unpin, no acks, no replies), HTTP connections are cut, then
// what is left of it is torn down.
func (in *instance) kill() {
	in.dead.Store(true)
	in.node.Conn().Close()
	_ = in.api.App().ShutdownWithTimeout(50 * time.Millisecond)
	<-in.done
	_ = in.node.Close()
}

var clusterHTTP = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func (in *instance) request(method, path string, body any, headers ...string) (response, error) {
	return sendRequest(clusterHTTP, in.URL, method, path, body, headers...)
}

// list reads every confirmed booking of cal through the instance's API.
func (in *instance) list(t *testing.T, cal string) []booking {
	t.Helper()
	var all []booking
	cursor := ""
	for {
		path := "/v1/calendars/" + cal + "/bookings?limit=1000"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var r response
		queuetest.CheckFor(t, 20*time.Second, func() (err error) {
			r, err = in.request("GET", path, nil)
			if err == nil && r.Status != http.StatusOK {
				err = fmt.Errorf("%s: list %s: %d %s", in.id, cal, r.Status, r.Body)
			}
			return err
		})
		var page struct {
			Bookings   []booking `json:"bookings"`
			NextCursor *string   `json:"next_cursor"`
		}
		r.json(t, &page)
		all = append(all, page.Bookings...)
		if page.NextCursor == nil {
			return all
		}
		cursor = *page.NextCursor
	}
}

// attempt is one booking request of the load and what came of it.
type attempt struct {
	instance   string
	cal        string
	customer   string
	start, end time.Time
	sentAt     time.Time
	doneAt     time.Time
	status     int // 0: no HTTP answer (the instance died)
	code       string
	booking    booking
	conflict   *struct{ Start, End time.Time }
	requestID  string // of a 202
	retryAfter string
}

// TestClusterTakeover runs three bookline instances on a three-node NATS
// cluster (R3 stream), books concurrently through all of them, kills the
// instance owning the most partitions, then stops a NATS node, and checks
// that nothing was lost, doubled or answered wrongly.
func TestClusterTakeover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster takeover test takes ~30s")
	}
	nc := queuetest.StartCluster(t, 3)
	urls := nc.URLs()
	ins := []*instance{
		startClusterInstance(t, urls, "i0"),
		startClusterInstance(t, urls, "i1"),
		startClusterInstance(t, urls, "i2"),
	}
	var cals []string
	for i := 0; i < 16; i++ {
		cals = append(cals, fmt.Sprintf("room-%02d", i))
	}
	for i, c := range cals {
		r, err := ins[i%3].request("PUT", "/v1/calendars/"+c, map[string]string{"timezone": "Europe/Berlin", "name": c})
		if err != nil || (r.Status != http.StatusCreated && r.Status != http.StatusOK) {
			t.Fatalf("create %s: %v %d %s", c, err, r.Status, r.Body)
		}
	}

	var (
		mu       sync.Mutex
		attempts []*attempt
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	decidedSince := func(since time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range attempts {
			if !a.sentAt.Before(since) && (a.status == http.StatusCreated || a.status == http.StatusConflict) {
				n++
			}
		}
		return n
	}
	const workers = 24
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 8))
			for i := 0; !stop.Load(); i++ {
				var in *instance
				for k := 0; k < 3; k++ {
					if c := ins[(w+i+k)%3]; !c.dead.Load() {
						in = c
						break
					}
				}
				a := &attempt{instance: in.id, cal: cals[rng.IntN(len(cals))], customer: fmt.Sprintf("w%d-%d", w, i)}
				a.start = base.Add(time.Duration(rng.IntN(48)) * 15 * time.Minute)
				a.end = a.start.Add(time.Duration(1+rng.IntN(6)) * 15 * time.Minute) // 15..90 min
				a.sentAt = time.Now()
				r, err := in.request("POST", "/v1/calendars/"+a.cal+"/bookings",
					map[string]string{"start": a.start.Format(time.RFC3339), "end": a.end.Format(time.RFC3339), "customer": a.customer},
					"Idempotency-Key", a.customer)
				a.doneAt = time.Now()
				if err == nil {
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
				mu.Lock()
				attempts = append(attempts, a)
				mu.Unlock()
			}
		}()
	}
	t0 := time.Now()
	queuetest.CheckFor(t, 60*time.Second, func() error {
		if n := decidedSince(t0); n < 300 {
			return fmt.Errorf("%d bookings decided", n)
		}
		return nil
	})

	// Kill the instance that owns the most partitions.
	var victim *instance
	var owned []int
	for _, in := range ins {
		o, err := in.node.OwnedPartitions(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s owns partitions %v", in.id, o)
		if victim == nil || len(o) > len(owned) {
			victim, owned = in, o
		}
	}
	if len(owned) == 0 {
		t.Fatal("no instance owns a partition")
	}
	killAt := time.Now()
	victim.kill()
	t.Logf("killed %s (owned %v)", victim.id, owned)
	var survivors []*instance
	for _, in := range ins {
		if in != victim {
			survivors = append(survivors, in)
		}
	}

	// Takeover: the first booking confirmed, after the kill, on each
	// partition the victim owned.
	takeover := map[int]time.Duration{}
	queuetest.CheckFor(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range attempts {
			p := queue.PartitionOf(a.cal, clusterPartitions)
			if a.status != http.StatusCreated || a.sentAt.Before(killAt) || !slices.Contains(owned, p) {
				continue
			}
			if d, ok := takeover[p]; !ok || a.doneAt.Sub(killAt) < d {
				takeover[p] = a.doneAt.Sub(killAt)
			}
		}
		if len(takeover) < len(owned) {
			return fmt.Errorf("%d of %d partitions taken over", len(takeover), len(owned))
		}
		return nil
	})
	var first, last time.Duration
	for p, d := range takeover {
		t.Logf("partition %d: first booking confirmed %s after the kill", p, d.Round(time.Millisecond))
		if first == 0 || d < first {
			first = d
		}
		last = max(last, d)
	}
	t.Logf("TAKEOVER: first confirmed booking on a killed instance's partition %s after the kill; all %d partitions within %s (takeover timeout %s)",
		first.Round(time.Millisecond), len(owned), last.Round(time.Millisecond), queue.DefaultTakeoverTimeout)
	// The target is ≤ 10s (TTL 5s + catch-up). It is measured and logged,
	// not asserted: on a loaded 2-core machine running every package's
	// tests at once it stretches, and a timed test would flake. That the
	// takeover happens at all is the wait above.
	if last > 10*time.Second {
		t.Logf("WARNING: takeover took %s, over the 10s target", last)
	}

	// Stop the NATS node a survivor is connected to; keep booking.
	stopped := 0
	for i, ns := range nc.Servers {
		if strings.Contains(survivors[0].node.Conn().ConnectedUrl(), fmt.Sprint(ns.Addr().(*net.TCPAddr).Port)) {
			stopped = i
		}
	}
	stopAt := time.Now()
	nc.Stop(stopped)
	t.Logf("stopped NATS node n%d", stopped)
	queuetest.CheckFor(t, 90*time.Second, func() error {
		if n := decidedSince(stopAt.Add(time.Second)); n < 300 {
			return fmt.Errorf("%d bookings decided after the NATS node stopped", n)
		}
		return nil
	})
	stop.Store(true)
	wg.Wait()

	// Resolve the 202s through the request records, on any survivor.
	for _, a := range attempts {
		if a.status != http.StatusAccepted {
			continue
		}
		queuetest.CheckFor(t, 30*time.Second, func() error {
			r, err := survivors[0].request("GET", "/v1/calendars/"+a.cal+"/requests/"+a.requestID, nil)
			if err != nil {
				return err
			}
			switch r.Status {
			case http.StatusCreated:
				a.status = r.Status
				r.json(t, &a.booking)
			case http.StatusConflict:
				a.status = r.Status
				r.errorCode(t)
				var e struct {
					Error struct {
						Code     string                          `json:"code"`
						Conflict *struct{ Start, End time.Time } `json:"conflict"`
					} `json:"error"`
				}
				r.json(t, &e)
				a.code, a.conflict = e.Error.Code, e.Error.Conflict
			default:
				return fmt.Errorf("request %s still %d", a.requestID, r.Status)
			}
			return nil
		})
	}

	// A new, empty instance joins and catches up the whole history.
	joined := startClusterInstance(t, nc.URLs(), "i3")
	readers := append(slices.Clone(survivors), joined)

	byCustomer := map[string]*attempt{}
	counts := map[string]int{}
	for _, a := range attempts {
		byCustomer[a.customer] = a
		counts[fmt.Sprint(a.status)]++
		switch a.status {
		case http.StatusCreated, http.StatusConflict:
		case http.StatusServiceUnavailable:
			if a.retryAfter == "" {
				t.Errorf("503 without Retry-After: %+v", a)
			}
		case 0:
			if a.instance != victim.id {
				t.Errorf("no HTTP answer from live instance %s", a.instance)
			}
		default:
			t.Errorf("unexpected status %d (%s) for %+v", a.status, a.code, a)
		}
		if a.status == http.StatusConflict && a.code != "slot_taken" {
			t.Errorf("409 with code %s", a.code)
		}
	}
	t.Logf("%d requests: %v", len(attempts), counts)

	// Every reader's listing: identical, without overlaps, holding every
	// 201, and no booking for a request that was answered 409.
	for _, cal := range cals {
		var ref []booking
		for i, in := range readers {
			got := in.list(t, cal)
			sort.Slice(got, func(i, j int) bool { return got[i].Start.Before(got[j].Start) })
			for k := 1; k < len(got); k++ {
				if got[k].Start.Before(got[k-1].End) {
					t.Errorf("%s on %s: overlapping confirmed bookings %+v and %+v", cal, in.id, got[k-1], got[k])
				}
			}
			if i == 0 {
				ref = got
			} else if !sameBookings(ref, got) {
				t.Errorf("%s: %s lists %d bookings, %s lists %d (or different ones)", cal, readers[0].id, len(ref), in.id, len(got))
			}
		}
		listed := map[string]booking{}
		for _, b := range ref {
			listed[b.ID] = b
			a := byCustomer[b.Customer]
			if a == nil {
				t.Errorf("%s: booking %s of unknown customer %q", cal, b.ID, b.Customer)
				continue
			}
			if a.status == http.StatusConflict {
				t.Errorf("%s: request %s was answered 409 but is booked as %s", cal, a.customer, b.ID)
			}
		}
		for _, a := range attempts {
			if a.cal != cal {
				continue
			}
			switch a.status {
			case http.StatusCreated:
				b, ok := listed[a.booking.ID]
				if !ok || !b.Start.Equal(a.start) || !b.End.Equal(a.end) {
					t.Errorf("%s: 201 booking %s (%s) is not listed as confirmed", cal, a.booking.ID, a.customer)
				}
			case http.StatusConflict:
				if a.conflict == nil {
					t.Errorf("%s: 409 without the conflicting interval", cal)
					continue
				}
				found := false
				for _, b := range ref {
					if b.Start.Equal(a.conflict.Start) && b.End.Equal(a.conflict.End) && b.Start.Before(a.end) && a.start.Before(b.End) {
						found = true
					}
				}
				if !found {
					t.Errorf("%s: 409 for [%s, %s) names conflict %v, which is not a confirmed overlapping booking", cal, a.start, a.end, *a.conflict)
				}
			}
		}
	}
	for _, in := range readers {
		datatest.CheckInvariants(t, in.node.Store())
		t.Logf("%s: %d catch-ups over a gap left by another owner", in.id, strings.Count(in.logs.String(), "reason=takeover"))
	}
}

func sameBookings(a, b []booking) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || !a[i].Start.Equal(b[i].Start) || !a[i].End.Equal(b[i].End) || a[i].Status != b[i].Status {
			return false
		}
	}
	return true
}
