package httpapi_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/data/secretkey"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// harness is one bookline process in-test: embedded NATS, a real bbolt
// file, the partition writers and the Fiber API on a loopback port.
type harness struct {
	t    testing.TB
	dir  string
	node *queue.Node
	api  *httpapi.Server
	URL  string
	done chan struct{}
	// pending is the second API of options.pendingAfter (doPending).
	pending     *httpapi.Server
	pendingURL  string
	pendingDone chan struct{}
}

type options struct {
	partitions int
	// replyTimeout is how long the API waits for a write's answer before
	// it answers 202 (default 10 s, more than a loaded machine needs).
	replyTimeout time.Duration
	// pendingAfter, when set, starts a second API on the same node whose
	// writes answer 202 after that long (doPending): for writes meant to
	// wait in the log while the writers are stopped. A short reply timeout
	// on the one API made writes that should be decided answer 202, and
	// reads that catch up fail, whenever the machine was slow.
	pendingAfter    time.Duration
	duplicateWindow time.Duration
	syncInterval    bool
	// api adjusts the API's configuration (keys, limits); its Logger, when
	// set, also receives the node's logs.
	api func(*httpapi.Config)
}

// start boots bookline on dir (t.TempDir() when empty). The process is
// stopped at cleanup, after checking the index invariants.
func start(t testing.TB, dir string, o options) *harness {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	if o.partitions == 0 {
		o.partitions = 4
	}
	if o.replyTimeout == 0 {
		o.replyTimeout = 10 * time.Second
	}
	cfg := httpapi.Config{ReplyTimeout: o.replyTimeout, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: httpapi.NewMetrics(),
		WithTraceID: queue.WithTraceID}
	if o.api != nil {
		o.api(&cfg)
	}
	node, err := queue.StartNode(queue.NodeConfig{DataDir: dir, Partitions: o.partitions, DuplicateWindow: o.duplicateWindow, SyncInterval: o.syncInterval, Logger: cfg.Logger, Observer: cfg.Metrics})
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	cfg.Metrics.AttachNode(sampledNode{node})
	cfg.Ports = nodePorts(node)
	h := &harness{t: t, dir: dir, node: node}
	if o.pendingAfter > 0 && cfg.Secrets == nil { // one hold-secret key for both APIs
		raw := make([]byte, secretkey.Size)
		if _, err := rand.Read(raw); err != nil {
			t.Fatal(err)
		}
		if cfg.Secrets, err = secretkey.New(raw); err != nil {
			t.Fatal(err)
		}
	}
	h.api = httpapi.New(node, cfg)
	h.URL, h.done = serveLoopback(t, h.api)
	if o.pendingAfter > 0 {
		quick := cfg
		quick.ReplyTimeout = o.pendingAfter
		h.pending = httpapi.New(node, quick)
		h.pendingURL, h.pendingDone = serveLoopback(t, h.pending)
	}
	t.Cleanup(h.stop)
	queuetest.CheckFor(t, queuetest.ReadyTimeout, func() error { return node.Ready() })
	return h
}

// nodePorts are the ports a node gives the API, as bookline serve wires
// them (cmd/bookline/wire.go), without Google and webhooks.
func nodePorts(n *queue.Node) httpapi.Ports {
	return httpapi.Ports{Refuser: n, Answerer: n, Outcomes: n, CalendarSync: n, Durability: n,
		Cluster: n, Snapshots: n, Skipper: n, Partitions: n, Versions: n}
}

// serveLoopback serves api on a free loopback port; done is closed when
// the server has stopped.
func serveLoopback(t testing.TB, api *httpapi.Server) (url string, done chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() {
		defer close(done)
		_ = api.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), done
}

// stop shuts the process down cleanly (idempotent), checking invariants.
func (h *harness) stop() {
	if h.node == nil {
		return
	}
	httpClient.CloseIdleConnections()
	_ = h.api.App().Shutdown()
	<-h.done
	if h.pending != nil {
		_ = h.pending.App().Shutdown()
		<-h.pendingDone
	}
	datatest.CheckInvariants(h.t, h.node.Store())
	if err := h.node.Close(); err != nil {
		h.t.Errorf("close node: %v", err)
	}
	h.node = nil
}

var httpClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %q: %v", r.Body, err)
	}
}

// errorCode returns error.code of an error body.
func (r response) errorCode(t testing.TB) string {
	t.Helper()
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	r.json(t, &e)
	if e.Error.Message == "" {
		t.Errorf("error body without message: %s", r.Body)
	}
	return e.Error.Code
}

func (h *harness) do(method, path string, body any, headers ...string) response {
	h.t.Helper()
	r, err := h.try(method, path, body, headers...)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// doPending sends a request to the API of options.pendingAfter: a write
// answers 202 soon when nothing decides it.
func (h *harness) doPending(method, path string, body any, headers ...string) response {
	h.t.Helper()
	if h.pending == nil {
		h.t.Fatal("doPending needs options.pendingAfter")
	}
	r, err := sendRequest(httpClient, h.pendingURL, method, path, body, headers...)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (h *harness) try(method, path string, body any, headers ...string) (response, error) {
	return sendRequest(httpClient, h.URL, method, path, body, headers...)
}

// sendRequest sends one request to base+path. body is sent as is when it is
// a string or []byte, as JSON otherwise; headers are name, value pairs.
func sendRequest(client *http.Client, base, method, path string, body any, headers ...string) (response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

func (h *harness) mustStatus(r response, want int) {
	h.t.Helper()
	if r.Status != want {
		h.t.Fatalf("status %d, want %d; body %s", r.Status, want, r.Body)
	}
}

func (h *harness) createCalendar(id, tz string) {
	h.t.Helper()
	r := h.do("PUT", "/v1/calendars/"+id, map[string]string{"timezone": tz, "name": id})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		h.t.Fatalf("create calendar %s: %d %s", id, r.Status, r.Body)
	}
}

type booking struct {
	ID         string          `json:"id"`
	CalendarID string          `json:"calendar_id"`
	Start      time.Time       `json:"start"`
	End        time.Time       `json:"end"`
	Customer   string          `json:"customer"`
	Status     string          `json:"status"`
	CreatedAt  time.Time       `json:"created_at"`
	Metadata   json.RawMessage `json:"metadata"`
	HoldSecret string          `json:"hold_secret"` // holds, at creation
}

func bookingBody(start time.Time, d time.Duration, customer string) map[string]any {
	return map[string]any{
		"start":    start.UTC().Format(time.RFC3339),
		"end":      start.Add(d).UTC().Format(time.RFC3339),
		"customer": customer,
	}
}

// listAll pages through every confirmed booking of a calendar.
func (h *harness) listAll(cal string) []booking {
	h.t.Helper()
	return h.listAllWith(cal)
}

// listAllWith is listAll with request headers (name, value pairs).
func (h *harness) listAllWith(cal string, headers ...string) []booking {
	h.t.Helper()
	var all []booking
	cursor := ""
	for {
		path := "/v1/calendars/" + cal + "/bookings?limit=1000"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := h.do("GET", path, nil, headers...)
		h.mustStatus(r, http.StatusOK)
		var page struct {
			Bookings   []booking `json:"bookings"`
			NextCursor *string   `json:"next_cursor"`
		}
		r.json(h.t, &page)
		all = append(all, page.Bookings...)
		if page.NextCursor == nil {
			return all
		}
		cursor = *page.NextCursor
	}
}

// sampledNode shows a node's partitions to the metrics, as cmd/bookline's
// adapter of the same name does.
type sampledNode struct{ *queue.Node }

func (n sampledNode) PartitionSamples(ctx context.Context) []httpapi.PartitionSample {
	sts := n.PartitionStatuses(ctx)
	out := make([]httpapi.PartitionSample, len(sts))
	for i, st := range sts {
		out[i] = httpapi.PartitionSample{Partition: st.Partition, AppliedSeq: st.AppliedSeq, CaughtUp: st.CaughtUp,
			Stalled: st.Stalled != nil, HistoryMismatch: st.HistoryMismatch, Active: st.Active,
			NumPending: st.NumPending, NumAckPending: st.NumAckPending}
	}
	return out
}
