package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

var _ httpapi.OutcomeReader = (*queue.Node)(nil)

// wantUnknown checks that r is the 404 of a request id that has no record
// and can get none.
func wantUnknown(t *testing.T, what string, r response) {
	t.Helper()
	if r.Status != http.StatusNotFound || r.errorCode(t) != "request_not_found" {
		t.Errorf("%s: %d %s, want 404 request_not_found", what, r.Status, r.Body)
	}
}

// TestOutcomeOfUnknownRequest: the outcome URL of a request id that was
// never sent answers 404 request_not_found once everything of its calendar
// is decided, for an open API and for every key; another key's id is still
// 403, decided from the id alone.
func TestOutcomeOfUnknownRequest(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("cal", "UTC")
	h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "ann"), "Idempotency-Key", "a"), http.StatusCreated)
	for _, path := range []string{
		"/v1/calendars/cal/requests/r.never",
		"/v1/calendars/cal/requests/" + httpapi.KeyRequestID("", "b"),
		"/v1/calendars/cal/requests/import-1",
		"/v1/calendars/nocal/requests/" + httpapi.KeyRequestID("", "a"), // the id exists, on another calendar
	} {
		wantUnknown(t, "open API: "+path, h.do("GET", path, nil))
	}
	h.mustStatus(h.do("GET", "/v1/calendars/cal/requests/"+httpapi.KeyRequestID("", "a"), nil), http.StatusCreated)

	k := start(t, "", options{api: func(c *httpapi.Config) { c.Keys = testKeyring(t) }})
	k.mustStatus(k.do("PUT", "/v1/calendars/alice", map[string]any{"timezone": "UTC"}, bearer(adminKey)...), http.StatusCreated)
	for id, want := range map[string]int{
		httpapi.KeyRequestID("web", "nope"):      404, // the shape of web's keyed ids
		"r.web.4cTq8uVbDn3HsW0GfZ1kPe":           404, // the shape of web's keyless ids
		"k.web.0123":                             404, // no id web can have
		"r.web.x":                                404,
		"k.web.0123456789ABCDEF0123456789ABCDEF": 404,
		"r.web.4cTq8uVbDn3HsW0GfZ1kPe.x":         404,
		httpapi.KeyRequestID("ops", "nope"):      403, // another key's
		"k.ops.0123":                             403,
		"imp.row-1":                              403, // an importer's
	} {
		r := k.do("GET", "/v1/calendars/alice/requests/"+id, nil, bearer(bookerKey)...)
		if want == 403 {
			if r.Status != 403 || r.errorCode(t) != "forbidden" {
				t.Errorf("booker reads %s: %d %s, want 403 forbidden", id, r.Status, r.Body)
			}
			continue
		}
		wantUnknown(t, "booker reads "+id, r)
	}
	wantUnknown(t, "admin reads an unknown importer id", k.do("GET", "/v1/calendars/alice/requests/imp.row-1", nil, bearer(adminKey)...))
}

// outcomeCounter counts the calls of the Outcomes port.
type outcomeCounter struct {
	*queue.Node
	calls atomic.Int64
}

func (o *outcomeCounter) Outcome(ctx context.Context, calID, reqID string) ([]byte, bool, error) {
	o.calls.Add(1)
	return o.Node.Outcome(ctx, calID, reqID)
}

// TestOutcomeOfMisshapenIDReadsNothing: an id in a shape the API never
// makes for the calling key is 404 without asking the backend (no stream
// read), and a well-shaped one asks it.
func TestOutcomeOfMisshapenIDReadsNothing(t *testing.T) {
	node, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), Partitions: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	backend := &outcomeCounter{Node: node}
	ports := nodePorts(node)
	ports.Outcomes = backend
	api := httpapi.New(node, httpapi.Config{ReplyTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Keys: testKeyring(t), Ports: ports})
	url, done := serveLoopback(t, api)
	t.Cleanup(func() { _ = api.App().Shutdown(); <-done })
	queuetest.CheckFor(t, queuetest.ReadyTimeout, node.Ready)
	get := func(id string) response {
		r, err := sendRequest(httpClient, url, "GET", "/v1/calendars/alice/requests/"+id, nil, bearer(bookerKey)...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, id := range []string{"k.web.0123", "r.web.x", "k.web." + strings.Repeat("g", 32), "r.web." + strings.Repeat("a", 65), "r.web.a.b"} {
		wantUnknown(t, id, get(id))
	}
	if n := backend.calls.Load(); n != 0 {
		t.Errorf("misshapen ids asked the backend %d times", n)
	}
	wantUnknown(t, "a well-shaped id", get(httpapi.KeyRequestID("web", "x")))
	if n := backend.calls.Load(); n != 1 {
		t.Errorf("a well-shaped id asked the backend %d times, want 1", n)
	}
}

// TestOutcomePendingUntilDecided: while the writers are stopped, the
// Location of a 202 answers 202 (its command is in the stream, undecided),
// and so does any id of that calendar (it might be one of the commands
// waiting); pollers that keep reading while the writers start again see 202
// and then the answer, never 404; then an id never sent is 404.
func TestOutcomePendingUntilDecided(t *testing.T) {
	h := start(t, "", options{pendingAfter: 100 * time.Millisecond, partitions: 1})
	h.createCalendar("cal", "UTC")
	h.createCalendar("other", "UTC")
	h.node.StopWriters()
	var locs []string
	for i := range 10 {
		r := h.doPending("POST", "/v1/calendars/cal/bookings", bookingBody(base.Add(time.Duration(i)*time.Hour), time.Hour, "c"+strconv.Itoa(i)))
		h.mustStatus(r, http.StatusAccepted)
		locs = append(locs, r.Header.Get("Location"))
	}
	if r := h.do("GET", locs[0], nil); r.Status != http.StatusAccepted || r.Header.Get("Location") != locs[0] {
		t.Fatalf("a stored, undecided request: %d %s", r.Status, r.Body)
	}
	if r := h.do("GET", "/v1/calendars/cal/requests/r.never", nil); r.Status != http.StatusAccepted {
		t.Errorf("an unknown id of a calendar with undecided commands: %d %s, want 202", r.Status, r.Body)
	}
	// "other" shares the only partition, but has nothing undecided.
	wantUnknown(t, "an unknown id of a calendar with nothing undecided", h.do("GET", "/v1/calendars/other/requests/r.never", nil))

	var wg sync.WaitGroup
	var bad atomic.Value
	for _, loc := range locs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				r, err := h.try("GET", loc, nil)
				switch {
				case err != nil:
					bad.Store(err.Error())
					return
				case r.Status == http.StatusCreated:
					return
				case r.Status != http.StatusAccepted:
					bad.Store(fmt.Sprintf("%s: %d %s", loc, r.Status, r.Body))
					return
				}
			}
			bad.Store(loc + ": still pending")
		}()
	}
	h.node.StartWriters()
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Fatalf("a poller saw %v", b)
	}
	wantUnknown(t, "an unknown id once everything is decided", h.do("GET", "/v1/calendars/cal/requests/r.never", nil))
}

// TestOutcomeAfterRecordRetentionIs404: once the record of a keyless write
// is gone with its retention, its outcome URL is 404, not 202 forever.
func TestOutcomeAfterRecordRetentionIs404(t *testing.T) {
	h := start(t, "", options{pendingAfter: 200 * time.Millisecond, api: func(c *httpapi.Config) {
		c.KeylessRecordRetention = time.Second
	}})
	h.createCalendar("cal", "UTC")
	h.node.StopWriters()
	r := h.doPending("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "ann"))
	h.mustStatus(r, http.StatusAccepted)
	loc := r.Header.Get("Location")
	h.node.StartWriters()
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if r := h.do("GET", loc, nil); r.Status != http.StatusCreated {
			return fmt.Errorf("decided: %d %s", r.Status, r.Body)
		}
		return nil
	})
	// Log time moves with commands only: keep sending some.
	queuetest.CheckFor(t, 20*time.Second, func() error {
		h.createCalendar("cal", "UTC")
		if r := h.do("GET", loc, nil); r.Status != http.StatusNotFound {
			return fmt.Errorf("after the retention: %d %s", r.Status, r.Body)
		}
		return nil
	})
	wantUnknown(t, "after the retention", h.do("GET", loc, nil))
}

// TestClusterOutcome: in cluster mode an instance that does not own the
// calendar's partition answers a request decided elsewhere, one stored
// while nobody decides (it catches up itself), and 404 for an id never
// sent.
func TestClusterOutcome(t *testing.T) {
	t.Parallel()
	url := queuetest.StartServer(t)
	var ins []*instance
	for _, id := range []string{"a", "b"} {
		in := &instance{id: id, logs: &queuetest.SyncBuffer{}}
		log := slog.New(slog.NewTextHandler(in.logs, nil))
		// No background follow: only the read may decide imp-2 on the
		// instance that does not own its partition.
		node, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), NATSURL: url, InstanceID: id, Partitions: 2,
			Replicas: 1, AllowLazySync: true, // not about the servers' durability
			TakeoverTimeout: 2 * time.Second, FollowInterval: time.Hour, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		in.node = node
		in.api = httpapi.New(node, httpapi.Config{ReplyTimeout: 10 * time.Second, Logger: log, Metrics: httpapi.NewMetrics(), Ports: nodePorts(node)})
		in.URL, in.done = serveLoopback(t, in.api)
		t.Cleanup(func() { in.stop(t) })
		queuetest.CheckFor(t, queuetest.ReadyTimeout, node.Ready)
		ins = append(ins, in)
	}
	do := func(in *instance, method, path string, body any, headers ...string) response {
		t.Helper()
		r, err := in.request(method, path, body, headers...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const cal = "shared"
	queuetest.CheckFor(t, 20*time.Second, func() error { // 202 until a writer owns the partition
		if r := do(ins[0], "PUT", "/v1/calendars/"+cal, map[string]any{"timezone": "UTC"}); r.Status != http.StatusCreated && r.Status != http.StatusOK {
			return fmt.Errorf("create: %d %s", r.Status, r.Body)
		}
		return nil
	})
	p := queue.PartitionOf(cal, 2)
	var owner, other *instance
	queuetest.CheckFor(t, 20*time.Second, func() error {
		owner, other = nil, nil
		for _, in := range ins {
			owned, err := in.node.OwnedPartitions(context.Background())
			if err != nil {
				return err
			}
			if slices.Contains(owned, p) {
				owner = in
			} else {
				other = in
			}
		}
		if owner == nil || other == nil {
			// The server pins at a delivery: after a stall that cost
			// the owner its pin, only a new command pins it again.
			do(ins[0], "PUT", "/v1/calendars/"+cal, map[string]any{"timezone": "UTC"})
			return fmt.Errorf("partition %d: no owner yet", p)
		}
		return nil
	})
	r := do(owner, "POST", "/v1/calendars/"+cal+"/bookings", bookingBody(base, time.Hour, "ann"), "Idempotency-Key", "one")
	if r.Status != http.StatusCreated {
		t.Fatalf("book: %d %s", r.Status, r.Body)
	}
	if r := do(other, "GET", "/v1/calendars/"+cal+"/requests/"+httpapi.KeyRequestID("", "one"), nil); r.Status != http.StatusCreated {
		t.Errorf("decided by the owner, read on the other: %d %s", r.Status, r.Body)
	}

	// Nobody decides: the partition's consumer is paused.
	if _, err := owner.node.JetStream().PauseConsumer(context.Background(), queue.StreamName, queue.ConsumerPrefix+strconv.Itoa(p), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// An importer's command, stored while nobody decides.
	cmd := fmt.Sprintf(`{"v":1,"type":"booking.create","request_id":"imp-2","calendar_id":%q,"booking":{"start":%q,"end":%q,"customer":"bob"}}`,
		cal, base.Add(time.Hour).Format(time.RFC3339), base.Add(2*time.Hour).Format(time.RFC3339))
	if _, err := owner.node.JetStream().Publish(context.Background(), queue.CommandSubject(cal), []byte(cmd)); err != nil {
		t.Fatal(err)
	}
	for _, in := range ins {
		if _, ok, err := in.node.Lookup(cal, "imp-2"); ok || err != nil {
			t.Fatalf("%s decided imp-2 before it was read (%v)", in.id, err)
		}
	}
	if r := do(other, "GET", "/v1/calendars/"+cal+"/requests/imp-2", nil); r.Status != http.StatusCreated {
		t.Errorf("stored while nobody decides, read on the other: %d %s", r.Status, r.Body)
	}
	for _, in := range ins {
		wantUnknown(t, in.id+": an id never sent", do(in, "GET", "/v1/calendars/"+cal+"/requests/r.never", nil))
	}
}

// BenchmarkRequestOutcome: the outcome route over HTTP for a decided
// request (the index alone) and for an id never sent (the index, the
// calendar's last log message, the index again).
func BenchmarkRequestOutcome(b *testing.B) {
	h := start(b, "", options{})
	h.createCalendar("cal", "UTC")
	h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "ann"), "Idempotency-Key", "a"), http.StatusCreated)
	for _, c := range []struct{ name, id string }{{"decided", httpapi.KeyRequestID("", "a")}, {"unknown", "r.never"}} {
		want := map[string]int{"decided": http.StatusCreated, "unknown": http.StatusNotFound}[c.name]
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if r := h.do("GET", "/v1/calendars/cal/requests/"+c.id, nil); r.Status != want {
					b.Fatalf("%d %s", r.Status, r.Body)
				}
			}
		})
	}
}
