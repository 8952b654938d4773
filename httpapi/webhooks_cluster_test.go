package httpapi_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/data/secretkey"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/httpapi/webhook"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// hookInstance is a bookline instance of a cluster with its webhook
// deliveries, wired as bookline serve wires them.
type hookInstance struct {
	*instance
	hooks    *webhook.Manager
	stopHook func()
	hookDone atomic.Bool
}

func startHookInstance(t *testing.T, urls, id string, key *secretkey.Key) *hookInstance {
	t.Helper()
	in := &instance{id: id, logs: &queuetest.SyncBuffer{}}
	log := slog.New(slog.NewTextHandler(in.logs, nil))
	node, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), NATSURL: urls, InstanceID: id, Replicas: 3,
		AllowLazySync: true, // about deliveries across instances, not the servers' durability
		Partitions:    clusterPartitions, TakeoverTimeout: 2 * time.Second, Logger: log})
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	in.node = node
	guard, err := webhook.NewGuard([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	// Attempts may take seconds (the receiver holds some); retries are
	// quick; pins move after 2s as the partitions' do.
	wc := webhook.Config{JS: node.JetStream(), Stream: queue.EventStreamName, SubjectPrefix: queue.EventSubjectPrefix, Replicas: 3,
		Guard: guard, Logger: log, Key: key, PinnedTTL: 2 * time.Second, AttemptTimeout: 5 * time.Second,
		RetryBase: 20 * time.Millisecond, RetryCap: 200 * time.Millisecond, MaxAttempts: 1000}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := webhook.Open(ctx, wc)
	if err != nil {
		t.Fatalf("open webhooks on %s: %v", id, err)
	}
	run, end := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(run)
	}()
	h := &hookInstance{instance: in, hooks: m, stopHook: func() { end(); <-done }}
	in.api = httpapi.New(node, httpapi.Config{ReplyTimeout: 10 * time.Second, Logger: log, Metrics: httpapi.NewMetrics(), Ports: hookPorts(node, m)})
	in.URL, in.done = serveLoopback(t, in.api)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", id, in.logs.String())
		}
		h.stopHooks()
		in.stop(t)
	})
	queuetest.CheckFor(t, 30*time.Second, node.Ready)
	return h
}

func (h *hookInstance) stopHooks() {
	if !h.hookDone.Swap(true) {
		h.stopHook()
	}
}

// delivered is this instance's count of successful deliveries to hook.
func (h *hookInstance) delivered(hook string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range h.hooks.Stats(ctx) {
		if s.ID == hook {
			return s.Delivered
		}
	}
	return 0
}

// hit is one request the receiver got.
type hit struct {
	id     string
	at     time.Time // when it arrived
	status int       // what the receiver answered (or meant to)
}

// heldCall is a request the receiver holds until the test says how to
// answer it: answer runs in the handler with the request's context and
// returns the status.
type heldCall struct {
	id     string
	answer chan func(context.Context) int
}

// holdingReceiver verifies every signature, records every request, and
// holds the next one when armed.
type holdingReceiver struct {
	t       *testing.T
	srv     *httptest.Server
	secret  atomic.Value
	mu      sync.Mutex
	hits    []hit
	armed   atomic.Bool
	held    chan heldCall
	badSigs atomic.Int64
}

func newHoldingReceiver(t *testing.T) *holdingReceiver {
	r := &holdingReceiver{t: t, held: make(chan heldCall, 1)}
	r.secret.Store("")
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *holdingReceiver) serve(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	body, _ := io.ReadAll(req.Body)
	id := req.Header.Get(webhook.HeaderID)
	if err := webhook.Verify(r.secret.Load().(string), req.Header, body, time.Now(), webhook.DefaultTolerance); err != nil {
		r.badSigs.Add(1)
		r.t.Errorf("signature of %s: %v", id, err)
	}
	status := http.StatusOK
	if r.armed.CompareAndSwap(true, false) {
		c := heldCall{id: id, answer: make(chan func(context.Context) int)}
		r.held <- c
		status = (<-c.answer)(req.Context())
	}
	r.mu.Lock()
	r.hits = append(r.hits, hit{id: id, at: at, status: status})
	r.mu.Unlock()
	w.WriteHeader(status)
}

func (r *holdingReceiver) all() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.hits)
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

func (r *holdingReceiver) ok() int {
	n := 0
	for _, h := range r.all() {
		if h.status == http.StatusOK {
			n++
		}
	}
	return n
}

// eventOrder is the Nats-Msg-Id of every outcome event of a calendar, in
// the event stream's order (the order an endpoint for all calendars gets
// them in), read message by message.
func eventOrder(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var out []string
	queuetest.CheckFor(t, 30*time.Second, func() error {
		out = nil
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, queue.EventStreamName)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("event %d: %w", seq, err)
			}
			if strings.HasPrefix(m.Subject, queue.EventSubjectPrefix) {
				out = append(out, m.Header.Get(jetstream.MsgIDHeader))
			}
		}
		return nil
	})
	return out
}

// TestClusterWebhookTakeovers: three bookline instances on a three-node
// NATS cluster (R3) deliver to one endpoint while bookings go on. The
// instance delivering is stopped gracefully in the middle of an attempt,
// then one is cut off from NATS while the receiver answers its attempt
// 500, then one is cut off between the receiver's 2xx and its ack. At the
// end every event of the stream was delivered, in the stream's order, each
// webhook-id accepted exactly once except the one event whose 2xx the
// last killed instance could not acknowledge; the instance cut off sends
// nothing after it lost NATS.
func TestClusterWebhookTakeovers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster webhook test takes ~45s")
	}
	nc := queuetest.StartCluster(t, 3)
	urls := nc.URLs()
	raw := make([]byte, secretkey.Size)
	_, _ = rand.Read(raw)
	key, err := secretkey.New(raw)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	live := []*hookInstance{}
	for i := range 3 {
		live = append(live, startHookInstance(t, urls, fmt.Sprintf("w%d", i), key))
	}
	pick := func(i int) *hookInstance {
		mu.Lock()
		defer mu.Unlock()
		return live[i%len(live)]
	}
	drop := func(x *hookInstance) {
		mu.Lock()
		defer mu.Unlock()
		live = slices.DeleteFunc(live, func(y *hookInstance) bool { return y == x })
	}
	add := func(x *hookInstance) {
		mu.Lock()
		defer mu.Unlock()
		live = append(live, x)
	}
	// The endpoint first: it gets every event stored after it.
	rcv := newHoldingReceiver(t)
	r, err := live[1].request("POST", "/v1/webhooks", map[string]any{"url": rcv.srv.URL})
	if err != nil || r.Status != http.StatusCreated {
		t.Fatalf("create webhook: %v %d %s", err, r.Status, r.Body)
	}
	var hook hookView
	r.json(t, &hook)
	rcv.secret.Store(hook.Secret)
	cals := []string{"hk-a", "hk-b", "hk-c", "hk-d"}
	for _, c := range cals {
		r, err := live[0].request("PUT", "/v1/calendars/"+c, map[string]string{"timezone": "UTC", "name": c})
		if err != nil || r.Status != http.StatusCreated {
			t.Fatalf("create %s: %v %d %s", c, err, r.Status, r.Body)
		}
	}

	// Bookings go on throughout, through whichever instances are up.
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := 0; !stop.Load(); i++ {
			in := pick(i)
			s := start.Add(time.Duration(i) * time.Hour)
			_, _ = in.request("POST", "/v1/calendars/"+cals[i%len(cals)]+"/bookings",
				map[string]string{"start": s.Format(time.RFC3339), "end": s.Add(time.Hour).Format(time.RFC3339), "customer": "c"})
			time.Sleep(15 * time.Millisecond)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	// deliverer finds the instance that delivers now (the one whose count
	// goes up while the others' do not), then arms the receiver and
	// returns the call it holds, made by that instance.
	deliverer := func() (*hookInstance, heldCall, map[*hookInstance]uint64) {
		t.Helper()
		var x *hookInstance
		queuetest.CheckFor(t, 30*time.Second, func() error {
			mu.Lock()
			ins := slices.Clone(live)
			mu.Unlock()
			before := map[*hookInstance]uint64{}
			for _, in := range ins {
				before[in] = in.delivered(hook.ID)
			}
			time.Sleep(300 * time.Millisecond) // a window to watch the counts in
			var moved []*hookInstance
			for _, in := range ins {
				if in.delivered(hook.ID) >= before[in]+3 {
					moved = append(moved, in)
				} else if in.delivered(hook.ID) != before[in] {
					return fmt.Errorf("%s delivered a few (a takeover still settling)", in.id)
				}
			}
			if len(moved) != 1 {
				return fmt.Errorf("%d instances deliver", len(moved))
			}
			x = moved[0]
			return nil
		})
		counts := map[*hookInstance]uint64{}
		mu.Lock()
		for _, in := range live {
			counts[in] = in.delivered(hook.ID)
		}
		mu.Unlock()
		rcv.armed.Store(true)
		select {
		case c := <-rcv.held:
			return x, c, counts
		case <-time.After(20 * time.Second):
			t.Fatal("no delivery to hold")
		}
		panic("unreachable")
	}
	resumed := func(after int) {
		t.Helper()
		queuetest.CheckFor(t, 40*time.Second, func() error {
			if n := rcv.ok(); n < after+10 {
				return fmt.Errorf("%d deliveries, waiting for %d", n, after+10)
			}
			return nil
		})
	}
	// nextAfter is how long after at the first request other than held's
	// came (the takeover's pause in deliveries).
	nextAfter := func(at time.Time, held string) time.Duration {
		for _, h := range rcv.all() {
			if h.at.After(at) && h.id != held {
				return h.at.Sub(at).Round(time.Millisecond)
			}
		}
		return -1
	}
	resumed(0)

	// 1. A graceful stop while an attempt is in flight: the attempt is let
	// finish and acknowledged; the next instance goes on after it.
	x, call, _ := deliverer()
	t.Logf("stopping %s gracefully while it delivers %s", x.id, call.id)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		drop(x)
		x.stopHooks()
		x.stop(t)
	}()
	call.answer <- func(ctx context.Context) int {
		// The receiver takes its time: a client that gave up now would
		// have the event delivered twice.
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		return http.StatusOK
	}
	stopAt := time.Now()
	<-stopped
	graceful := call.id
	add(startHookInstance(t, urls, "w3", key))
	resumed(rcv.ok())
	t.Logf("graceful stop: next delivery %s after the stop began", nextAfter(stopAt, call.id))

	// 2. Cut off from NATS while the receiver answers its attempt 500: the
	// instance sends nothing more (it could not show the event is still
	// its own), and the next one delivers the event once NATS gives it
	// out again.
	x, call, _ = deliverer()
	t.Logf("cutting %s off while it delivers %s, answered 500", x.id, call.id)
	drop(x)
	cut := make(chan time.Time, 1)
	call.answer <- func(context.Context) int {
		x.node.Conn().Close()
		cut <- time.Now()
		return http.StatusInternalServerError
	}
	cutAt := <-cut
	// An observation window shorter than AckWait (10s), in which NATS
	// gives the event to nobody: any request now would be the cut-off
	// instance's.
	time.Sleep(5 * time.Second)
	for _, h := range rcv.all() {
		if h.at.After(cutAt) {
			t.Errorf("request %s at +%s after %s was cut off from NATS", h.id, h.at.Sub(cutAt), x.id)
		}
	}
	x.kill()
	x.stopHooks()
	add(startHookInstance(t, urls, "w4", key))
	resumed(rcv.ok())
	t.Logf("cut off (500): the event again %s after the cut", func() time.Duration {
		for _, h := range rcv.all() {
			if h.at.After(cutAt) && h.id == call.id {
				return h.at.Sub(cutAt).Round(time.Millisecond)
			}
		}
		return -1
	}())

	// 3. Cut off between the receiver's 2xx and the ack: the one case of a
	// second delivery of the same webhook-id.
	x, call, _ = deliverer()
	t.Logf("cutting %s off between the 2xx for %s and its ack", x.id, call.id)
	drop(x)
	call.answer <- func(context.Context) int {
		x.node.Conn().Close()
		return http.StatusOK
	}
	twice := call.id
	x.kill()
	x.stopHooks()
	resumed(rcv.ok())

	stop.Store(true)
	wg.Wait()
	reader, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	rjs, err := jetstream.New(reader)
	if err != nil {
		t.Fatal(err)
	}
	order := eventOrder(t, rjs)
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	queuetest.CheckFor(t, 60*time.Second, func() error {
		got := map[string]bool{}
		for _, h := range rcv.all() {
			if h.status == http.StatusOK {
				got[h.id] = true
			}
		}
		for _, id := range order {
			if !got[id] {
				return fmt.Errorf("event %s of %d not delivered yet", id, len(order))
			}
		}
		return nil
	})
	okCount := map[string]int{}
	last := -1
	for _, h := range rcv.all() {
		p, known := pos[h.id]
		if !known {
			t.Errorf("delivery of %s, which is not in the event stream", h.id)
			continue
		}
		if p < last {
			t.Errorf("%s (stream position %d) delivered after position %d", h.id, p, last)
		}
		last = max(last, p)
		if h.status == http.StatusOK {
			okCount[h.id]++
		}
	}
	for id, n := range okCount {
		switch {
		case id == twice && n != 2:
			t.Errorf("event %s, acknowledged by nobody after its 2xx, accepted %d times, want 2", id, n)
		case id != twice && n != 1:
			t.Errorf("event %s accepted %d times (graceful stop at %s)", id, n, graceful)
		}
	}
	if rcv.badSigs.Load() > 0 {
		t.Errorf("%d bad signatures", rcv.badSigs.Load())
	}
	t.Logf("%d events, %d requests, each in stream order", len(order), len(rcv.all()))
}
