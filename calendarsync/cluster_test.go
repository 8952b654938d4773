package calendarsync_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/calendar/v3"
	"google.golang.org/api/option"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/calendarsync/googletest"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// googleCall is one request an instance made to Google.
type googleCall struct {
	instance, method, path string
	at                     time.Time
}

// googleLine is one instance's way to the fake Google: it records every
// call and, when cut, answers 503 without passing the call on (the
// instance lost its way to Google). While holding, it keeps every call
// until release, then passes it on whether or not its client still waits
// (as Google may apply a request whose client gave up).
type googleLine struct {
	instance string
	cut      atomic.Bool
	mu       *sync.Mutex
	calls    *[]googleCall
	srv      *httptest.Server

	holding atomic.Bool
	release chan struct{}
	heldMu  sync.Mutex
	held    []*heldGoogleCall
	late    sync.WaitGroup
}

// heldGoogleCall is a call the line held: when its client gave up, and
// what Google answered once it was passed on.
type heldGoogleCall struct {
	method, path string
	gaveUp       time.Time
	status       int
}

func newGoogleLine(t *testing.T, fake *googletest.Server, instance string, mu *sync.Mutex, calls *[]googleCall) *googleLine {
	u, err := url.Parse(strings.TrimSuffix(fake.Endpoint(), "/calendar/v3/"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	l := &googleLine{instance: instance, mu: mu, calls: calls, release: make(chan struct{})}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if r.Method == http.MethodPost && strings.HasSuffix(path, "/events") {
			// An insert names its event in the body.
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var ev struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(body, &ev)
			path += "/" + ev.ID
		}
		if l.holding.Load() {
			l.hold(w, r, proxy, path)
			return
		}
		l.mu.Lock()
		*l.calls = append(*l.calls, googleCall{instance, r.Method, path, time.Now()})
		l.mu.Unlock()
		if l.cut.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":503,"message":"cut off","errors":[{"reason":"backendError"}]}}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(l.srv.Close)
	return l
}

// hold keeps call r until release, then passes it on detached from its
// client (recorded as a call when it reaches Google).
func (l *googleLine) hold(w http.ResponseWriter, r *http.Request, proxy *httputil.ReverseProxy, path string) {
	l.late.Add(1)
	defer l.late.Done()
	// Read the body first: net/http notices a client that went away (and
	// ends r.Context()) only once the body is read.
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	h := &heldGoogleCall{method: r.Method, path: path}
	l.heldMu.Lock()
	l.held = append(l.held, h)
	l.heldMu.Unlock()
	select {
	case <-r.Context().Done():
		l.heldMu.Lock()
		h.gaveUp = time.Now()
		l.heldMu.Unlock()
		<-l.release
	case <-l.release:
	}
	l.mu.Lock()
	*l.calls = append(*l.calls, googleCall{l.instance, r.Method, path, time.Now()})
	l.mu.Unlock()
	rec := httptest.NewRecorder()
	late := r.Clone(context.Background())
	late.Body = io.NopCloser(bytes.NewReader(body))
	proxy.ServeHTTP(rec, late)
	l.heldMu.Lock()
	h.status = rec.Code
	l.heldMu.Unlock()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func (l *googleLine) heldCalls() []heldGoogleCall {
	l.heldMu.Lock()
	defer l.heldMu.Unlock()
	out := make([]heldGoogleCall, len(l.held))
	for i, h := range l.held {
		out[i] = *h
	}
	return out
}

func (l *googleLine) service(ctx context.Context) (*calendar.Service, error) {
	return calendar.NewService(ctx, option.WithEndpoint(l.srv.URL+"/calendar/v3/"), option.WithoutAuthentication())
}

// startClusterNode starts one instance on the NATS cluster with the
// Google sync wired as bookline serve wires it in cluster mode.
func startClusterNode(t *testing.T, urls, id string, line *googleLine) node {
	t.Helper()
	gc := fastRetries(line.service)
	gc.BusyInterval = 200 * time.Millisecond
	return startClusterNodeWith(t, urls, id, gc, true)
}

// startClusterNodeWith starts an instance with gc (Fence wired only when
// fenced: the test that shows what the fence prevents runs without it
// once).
func startClusterNodeWith(t *testing.T, urls, id string, gc calendarsync.Config, fenced bool) node {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	gc.Logger = logger
	var n node
	var err error
	// The default takeover timeout: the test asserts that only the owner
	// talks to Google, and with 2 s a loaded machine could miss an
	// owner's heartbeats long enough for its membership to expire.
	n.Node, err = queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), NATSURL: urls, InstanceID: id, Partitions: 4, Replicas: 3,
		// Not about durability: the test cluster keeps NATS's lazy sync.
		AllowLazySync:   true,
		TakeoverTimeout: queue.DefaultTakeoverTimeout, Logger: logger,
		Followers: []func(*queue.Node) queue.Follower{func(qn *queue.Node) queue.Follower {
			gc.Owns, gc.Progress, gc.CatchUp = qn.OwnsCalendar, qn, qn.SyncCalendar
			if fenced {
				gc.Fence = qn.FenceCalendar
			}
			if gc.WebhookURL != "" {
				gc.Channels = qn.GoogleChannels() // kept only with gc.Key
			}
			n.google = calendarsync.New(gc, qn.Store(), qn.SubmitInternal)
			return n.google
		}}})
	if err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
	return n
}

// TestClusterMirrorSurvivesOwner: three instances on three NATS nodes
// (R3). Only the owner of the calendar's partition mirrors it and polls
// its busy time. The owner loses its way to Google with operations queued
// (new bookings, cancellations of mirrored and of unmirrored bookings, a
// reschedule), then dies. The instance that takes the partition over
// mirrors exactly what the log says, in order, going on after what Google
// had confirmed: nothing lost, no event left for a cancelled booking, no
// operation that Google had confirmed repeated.
func TestClusterMirrorSurvivesOwner(t *testing.T) {
	t.Parallel()
	fake := googletest.New(t)
	const g = "team@group.calendar.google.com"
	fake.AddCalendar(g)
	c := queuetest.StartCluster(t, 3)
	urls := c.URLs()
	var mu sync.Mutex
	var calls []googleCall
	var nodes []node
	lines := map[string]*googleLine{}
	closed := map[string]bool{}
	for i := range 3 {
		id := fmt.Sprintf("g%d", i)
		lines[id] = newGoogleLine(t, fake, id, &mu, &calls)
		n := startClusterNode(t, urls, id, lines[id])
		t.Cleanup(func() {
			if !closed[id] {
				_ = n.Close()
			}
		})
		nodes = append(nodes, n)
	}
	const cal = "mirrored"
	p := queue.PartitionOf(cal, 4)
	var owner node
	var rest []node
	queuetest.CheckFor(t, 30*time.Second, func() error {
		owner, rest = node{}, nil
		for _, n := range nodes {
			st, _, err := n.ClusterStatus(context.Background())
			if err != nil {
				return err
			}
			if len(st.Members) != 3 {
				return fmt.Errorf("%s sees members %v", st.Instance, st.Members)
			}
			if slices.Contains(st.Consuming, p) {
				owner = n
			} else {
				rest = append(rest, n)
			}
		}
		if owner.Node == nil || len(rest) != 2 {
			return fmt.Errorf("partition %d pulled by %d instances", p, 3-len(rest))
		}
		return nil
	})
	ownerID := owner.InstanceID()
	t.Logf("%s owns partition %d", ownerID, p)
	// Linked once the map settled: before, the first instance owned
	// every partition and rightly polled them.
	link(t, rest[0], cal, g, true)

	// Mirrored by the owner while it can reach Google.
	var first []string
	for i := range 3 {
		s, e := slot(i)
		r := book(t, owner, cal, s, e)
		if r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("booking %d: %+v", i, r)
		}
		first = append(first, r.Booking.ID)
	}
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if n := len(fake.Events(g)); n != 3 || pending(t, owner, cal) != 0 {
			return fmt.Errorf("%d events in google, %d operations queued", n, pending(t, owner, cal))
		}
		return nil
	})
	// Busy time polled by the owner alone.
	queuetest.CheckFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range calls {
			if c.method == http.MethodGet && strings.HasSuffix(c.path, "/events") && c.instance == ownerID {
				return nil
			}
		}
		return fmt.Errorf("the owner did not read busy time yet")
	})

	// Cut off from Google: everything from here waits in the owner's outbox.
	lines[ownerID].cut.Store(true)
	mu.Lock()
	cutAt := len(calls)
	mu.Unlock()
	var second []string
	for i := 3; i < 9; i++ {
		s, e := slot(i)
		r := book(t, owner, cal, s, e)
		if r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("booking %d: %+v", i, r)
		}
		second = append(second, r.Booking.ID)
	}
	cancel := func(id string) {
		if r := submit(t, owner, &actor.Command{Type: actor.TypeBookingCancel, CalendarID: cal, BookingID: id}); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("cancel %s: %+v", id, r)
		}
	}
	cancel(first[0])  // mirrored, then cancelled: its event must go
	cancel(second[0]) // never mirrored: created and deleted in order
	cancel(second[1])
	s, e := slot(20)
	if r := submit(t, owner, &actor.Command{Type: actor.TypeBookingReschedule, CalendarID: cal, BookingID: first[1],
		Reschedule: &actor.IntervalSpec{Start: s, End: e}}); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("reschedule: %+v", r)
	}
	if d := pending(t, owner, cal); d != 10 {
		t.Fatalf("%d operations queued on the owner, want 10", d)
	}
	mu.Lock()
	killIdx := len(calls)
	mu.Unlock()
	killed := time.Now()
	closed[ownerID] = true
	owner.Node.Conn().Close()
	_ = owner.Close()
	t.Logf("killed %s with 10 mirror operations queued", ownerID)

	// The next owner mirrors the rest, in order.
	queuetest.CheckFor(t, 60*time.Second, func() error {
		for _, n := range rest {
			if err := n.SyncCalendar(context.Background(), cal); err != nil {
				return err
			}
			if n.OwnsCalendar(cal) && pending(t, n, cal) == 0 {
				return nil
			}
		}
		return fmt.Errorf("no survivor drained the calendar yet")
	})
	var heir node
	for _, n := range rest {
		if n.OwnsCalendar(cal) {
			heir = n
		}
	}
	t.Logf("MIRROR TAKEOVER: %s drained the 10 operations %s after the kill (takeover timeout %s)",
		heir.InstanceID(), time.Since(killed).Round(time.Millisecond), queue.DefaultTakeoverTimeout)
	for _, n := range rest {
		if err := n.SyncCalendar(context.Background(), cal); err != nil {
			t.Fatal(err)
		}
	}
	if confirmed := compareMirror(t, heir, fake, cal, g); confirmed != 6 {
		t.Errorf("%d confirmed bookings, want 6", confirmed)
	}
	compareMirror(t, rest[0], fake, cal, g)
	compareMirror(t, rest[1], fake, cal, g)

	// What the survivors sent Google: only the heir mirrored, never an
	// operation Google had confirmed for the dead owner, and for each
	// booking in log order.
	mu.Lock()
	defer mu.Unlock()
	ops := map[string][]string{} // booking id -> methods, in call order
	for i, c := range calls {
		if c.instance == ownerID {
			continue
		}
		if c.method == http.MethodGet && strings.HasSuffix(c.path, "/events") && i < killIdx {
			t.Errorf("%s read busy time while %s owned the calendar", c.instance, ownerID)
		}
		if !strings.Contains(c.path, "/events") || c.method == http.MethodGet {
			continue // busy reads (and the reads of an insert's 409)
		}
		if i < cutAt || c.instance != heir.InstanceID() {
			t.Errorf("%s mirrored while not the owner: %s %s", c.instance, c.method, c.path)
			continue
		}
		id := c.path[strings.LastIndexByte(c.path, '/')+1:]
		ops[id] = append(ops[id], c.method)
	}
	for _, id := range first[2:] {
		if len(ops[id]) > 0 {
			t.Errorf("booking %s, confirmed by Google before the kill, mirrored again: %v", id, ops[id])
		}
	}
	for _, id := range []string{first[0], second[0], second[1]} {
		m := ops[id]
		if len(m) == 0 || m[len(m)-1] != http.MethodDelete {
			t.Errorf("cancelled booking %s: last call %v, want DELETE", id, m)
		}
	}
	for _, id := range second[2:] {
		if m := ops[id]; len(m) == 0 || m[0] != http.MethodPost || slices.Contains(m, http.MethodDelete) {
			t.Errorf("booking %s made while the owner was cut off: calls %v, want an insert", id, m)
		}
	}
	if m := ops[first[1]]; len(m) == 0 || m[len(m)-1] != http.MethodPatch {
		t.Errorf("rescheduled booking %s: calls %v, want a patch", first[1], m)
	}
	t.Logf("calls of the heir per event: %v", ops)
	mu.Unlock()
	for _, n := range rest {
		closed[n.InstanceID()] = true
		stopNode(t, n)
	}
	mu.Lock()
}
