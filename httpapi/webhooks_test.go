package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/data/secretkey"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/httpapi/webhook"
	"github.com/bookline/bookline/httpapi/webhook/endpoint"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// hookHarness is bookline in-test with webhook deliveries: embedded NATS,
// a real bbolt index, the writers, the webhook manager and the API.
type hookHarness struct {
	harness
	hooks    *webhook.Manager
	stopHook func()
	metrics  *httpapi.Metrics
}

func hookPorts(n *queue.Node, m *webhook.Manager) httpapi.Ports {
	p := nodePorts(n)
	p.Webhooks = m
	return p
}

// fastHooks is a retry schedule for tests: the default one spans days.
func fastHooks() webhook.Config {
	return webhook.Config{RetryBase: 20 * time.Millisecond, RetryCap: 200 * time.Millisecond, MaxAttempts: 1000,
		AttemptTimeout: 500 * time.Millisecond, PinnedTTL: 2 * time.Second}
}

func startHooks(t *testing.T, dir string, wc webhook.Config) *hookHarness {
	t.Helper()
	return startHooksWith(t, dir, wc, false)
}

// startHooksWith is startHooks, with the node's event batches on or off.
func startHooksWith(t *testing.T, dir string, wc webhook.Config, eventBatches bool) *hookHarness {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	log := slog.New(slog.NewTextHandler(testLogOut(), nil))
	metrics := httpapi.NewMetrics()
	node, err := queue.StartNode(queue.NodeConfig{DataDir: dir, Partitions: 2, Logger: log, Observer: metrics, EventBatches: eventBatches})
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	guard, err := webhook.NewGuard([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	wc.JS, wc.Stream, wc.SubjectPrefix, wc.Guard, wc.Logger = node.JetStream(), queue.EventStreamName, queue.EventSubjectPrefix, guard, log
	// As bookline serve wires it (cmd/bookline/wire.go).
	parts := node.PartitionCount()
	wc.BatchSubjectPrefix, wc.PartitionOf = queue.EventBatchSubjectPrefix, func(cal string) int { return queue.PartitionOf(cal, parts) }
	if wc.Key == nil {
		// As bookline serve does: the data directory's own key.
		if wc.Key, err = secretkey.LoadOrCreate(filepath.Join(dir, secretkey.FileName)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := webhook.Open(ctx, wc)
	if err != nil {
		t.Fatalf("open webhooks: %v", err)
	}
	run, end := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(run)
	}()
	metrics.AttachNode(sampledNode{node})
	metrics.AttachWebhooks(m)
	h := &hookHarness{harness: harness{t: t, dir: dir, node: node}, hooks: m, metrics: metrics,
		stopHook: func() { end(); <-done }}
	h.api = httpapi.New(node, httpapi.Config{ReplyTimeout: 10 * time.Second, Logger: log, Metrics: metrics, Ports: hookPorts(node, m)})
	h.URL, h.done = serveLoopback(t, h.api)
	t.Cleanup(h.stop)
	queuetest.CheckFor(t, queuetest.ReadyTimeout, func() error { return node.Ready() })
	return h
}

func (h *hookHarness) stop() {
	if h.node == nil {
		return
	}
	h.stopHook()
	h.harness.stop()
}

// delivery is one request the receiver got.
type delivery struct {
	ID, Type, Calendar string
	Seq                uint64
	// Body is what was delivered.
	Body       []byte
	Status     int
	Signatures int
	// SeriesID and Occurrences are a series' (its booking's series_id,
	// and how many occurrences the payload lists).
	SeriesID    string
	Occurrences int
}

// receiver is a webhook endpoint that verifies every signature and
// answers as its mode says.
type receiver struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	secrets []string
	got     []delivery
	mode    atomic.Value // "ok", "500", "410", "timeout", "slow", "drop"
	badSigs atomic.Int64
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t}
	r.mode.Store("ok")
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) setSecrets(s ...string) {
	r.mu.Lock()
	r.secrets = s
	r.mu.Unlock()
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	secrets := r.secrets
	r.mu.Unlock()
	for _, s := range secrets {
		if err := webhook.Verify(s, req.Header, body, time.Now(), webhook.DefaultTolerance); err != nil {
			r.badSigs.Add(1)
			r.t.Errorf("signature of %s with secret %.12s…: %v", req.Header.Get(webhook.HeaderID), s, err)
		}
	}
	var env struct {
		Type string `json:"type"`
		Data struct {
			CalendarID string `json:"calendar_id"`
			Seq        uint64 `json:"seq"`
			Booking    struct {
				SeriesID string `json:"series_id"`
			} `json:"booking"`
			Occurrences []json.RawMessage `json:"occurrences"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		r.t.Errorf("body %q: %v", body, err)
	}
	d := delivery{ID: req.Header.Get(webhook.HeaderID), Type: env.Type, Calendar: env.Data.CalendarID, Seq: env.Data.Seq, Body: body,
		Signatures: len(strings.Fields(req.Header.Get(webhook.HeaderSignature))),
		SeriesID:   env.Data.Booking.SeriesID, Occurrences: len(env.Data.Occurrences)}
	switch r.mode.Load().(string) {
	case "500":
		d.Status = 500
	case "410":
		d.Status = 410
	case "timeout":
		select { // longer than the attempt timeout
		case <-req.Context().Done():
		case <-time.After(3 * time.Second):
		}
		d.Status = 599
	case "drop":
		d.Status = 598
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
			}
		}
	case "slow":
		time.Sleep(50 * time.Millisecond)
		d.Status = 200
	default:
		d.Status = 200
	}
	r.mu.Lock()
	r.got = append(r.got, d)
	r.mu.Unlock()
	if d.Status < 598 {
		w.WriteHeader(d.Status)
		if d.Status == 200 {
			// A chatty receiver: bookline reads a bounded part of it.
			_, _ = w.Write([]byte(strings.Repeat("x", 200<<10)))
		}
	}
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *receiver) count(pred func(delivery) bool) int {
	n := 0
	for _, d := range r.deliveries() {
		if pred(d) {
			n++
		}
	}
	return n
}

type hookView struct {
	ID             string           `json:"id"`
	URL            string           `json:"url"`
	Events         []string         `json:"events"`
	Calendars      []string         `json:"calendars"`
	Enabled        bool             `json:"enabled"`
	DisabledReason string           `json:"disabled_reason"`
	Secret         string           `json:"secret"`
	Secrets        []map[string]any `json:"secrets"`
	Status         *endpoint.Status `json:"status"`
}

func (h *hookHarness) createHook(body map[string]any) hookView {
	h.t.Helper()
	r := h.do("POST", "/v1/webhooks", body)
	h.mustStatus(r, http.StatusCreated)
	var v hookView
	r.json(h.t, &v)
	if !strings.HasPrefix(v.Secret, webhook.SecretPrefix) || !endpoint.ValidID(v.ID) {
		h.t.Fatalf("created: %s", r.Body)
	}
	return v
}

func (h *hookHarness) getHook(id string) hookView {
	h.t.Helper()
	r := h.do("GET", "/v1/webhooks/"+id, nil)
	h.mustStatus(r, http.StatusOK)
	var v hookView
	r.json(h.t, &v)
	return v
}

// streamEvents reads the event stream: the Nats-Msg-Id of every outcome
// event per calendar, in stream order.
func streamEvents(t *testing.T, js jetstream.JetStream) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, queue.EventStreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{queue.EventSubjectPrefix + "*"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for n := info.NumPending; n > 0; n-- {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		cal := strings.TrimPrefix(m.Subject(), queue.EventSubjectPrefix)
		out[cal] = append(out[cal], m.Headers().Get(jetstream.MsgIDHeader))
	}
	return out
}

// streamEventsOnce is streamEvents once the stream holds n events: the
// publisher sends them after the commits that queued them, so the last
// answer can come before its event is in the stream.
func streamEventsOnce(t *testing.T, js jetstream.JetStream, n int) map[string][]string {
	t.Helper()
	var got map[string][]string
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if got = streamEvents(t, js); total(got) != n {
			return fmt.Errorf("stream holds %d events, want %d", total(got), n)
		}
		return nil
	})
	return got
}

// checkDelivered: every event of the stream reached the receiver with a
// 2xx, and per calendar their first successful deliveries follow stream
// order.
func checkDelivered(rcv *receiver, want map[string][]string) error {
	first := map[string]int{}
	for i, d := range rcv.deliveries() {
		if d.Status == 200 {
			if _, ok := first[d.ID]; !ok {
				first[d.ID] = i
			}
		}
	}
	for cal, ids := range want {
		last := -1
		for _, id := range ids {
			i, ok := first[id]
			if !ok {
				return fmt.Errorf("calendar %s: event %s not delivered (%d of %d delivered)", cal, id, len(first), total(want))
			}
			if i < last {
				return fmt.Errorf("calendar %s: event %s delivered before the one stored before it", cal, id)
			}
			last = i
		}
	}
	return nil
}

func total(m map[string][]string) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

func (h *hookHarness) book(cal string, i int) {
	h.t.Helper()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
	r := h.do("POST", "/v1/calendars/"+cal+"/bookings", bookingBody(start, time.Hour, fmt.Sprintf("c%d", i)))
	h.mustStatus(r, http.StatusCreated)
}

// TestWebhookDeliveryAcrossRestartAndOutage: an endpoint that answers
// slowly, then 500, then not in time, then drops connections, across a
// bookline restart, gets every event at least once, in order per
// calendar, each one signed.
func TestWebhookDeliveryAcrossRestartAndOutage(t *testing.T) {
	dir := t.TempDir()
	rcv := newReceiver(t)
	h := startHooks(t, dir, fastHooks())
	cals := []string{"wa", "wb", "wc"}
	hook := h.createHook(map[string]any{"url": rcv.srv.URL + "/hook", "description": "all events"})
	rcv.setSecrets(hook.Secret)
	for _, c := range cals {
		h.createCalendar(c, "UTC")
	}
	rcv.mode.Store("slow")
	n := 0
	for range 6 {
		h.book(cals[n%3], n)
		n++
	}
	rcv.mode.Store("500")
	for range 6 {
		h.book(cals[n%3], n)
		n++
	}
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if k := rcv.count(func(d delivery) bool { return d.Status == 500 }); k < 5 {
			return fmt.Errorf("%d failed attempts", k)
		}
		return nil
	})
	v := h.getHook(hook.ID)
	if v.Status == nil || v.Status.FailingEvent == "" || len(v.Status.Attempts) == 0 || v.Status.Attempts[0].Status != 500 {
		t.Fatalf("status while failing: %+v", v.Status)
	}
	rcv.mode.Store("timeout")
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if k := rcv.count(func(d delivery) bool { return d.Status == 599 }); k < 2 {
			return fmt.Errorf("%d timed out attempts", k)
		}
		return nil
	})
	h.stop()

	rcv.mode.Store("drop")
	h = startHooks(t, dir, fastHooks())
	for range 6 {
		h.book(cals[n%3], n)
		n++
	}
	queuetest.CheckFor(t, 40*time.Second, func() error {
		if k := rcv.count(func(d delivery) bool { return d.Status == 598 }); k < 2 {
			return fmt.Errorf("%d dropped attempts", k)
		}
		return nil
	})
	rcv.mode.Store("ok")
	want := streamEventsOnce(t, h.node.JetStream(), 3+n)
	queuetest.CheckFor(t, 30*time.Second, func() error { return checkDelivered(rcv, want) })
	if rcv.badSigs.Load() > 0 {
		t.Fatalf("%d bad signatures", rcv.badSigs.Load())
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		st := h.getHook(hook.ID).Status
		if st.FailingEvent != "" || st.LastSuccess == nil {
			return fmt.Errorf("status after recovery: %+v", st)
		}
		return nil
	})
	// Metrics: what this instance delivered, and no lag once done.
	queuetest.CheckFor(t, 10*time.Second, func() error {
		body := string(h.do("GET", "/metrics", nil).Body)
		for _, want := range []string{
			`bookline_webhook_lag_events{endpoint="` + hook.ID + `"} 0`,
			`bookline_webhook_deliveries_total{endpoint="` + hook.ID + `"}`,
			`bookline_webhook_delivery_failures_total{endpoint="` + hook.ID + `",reason="network"}`,
			`bookline_webhook_enabled{endpoint="` + hook.ID + `"} 1`,
		} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("metrics lack %s", want)
			}
		}
		return nil
	})
}

// TestWebhookFiltersAndTypes: an endpoint limited to a calendar and to
// event types gets only those, with the documented types.
func TestWebhookFiltersAndTypes(t *testing.T) {
	rcv := newReceiver(t)
	h := startHooks(t, "", fastHooks())
	h.createCalendar("fa", "UTC")
	h.createCalendar("fb", "UTC")
	hook := h.createHook(map[string]any{"url": rcv.srv.URL, "calendars": []string{"fb"}, "events": []string{"booking.cancelled", "hold.created", "calendar.updated"}})
	rcv.setSecrets(hook.Secret)
	all := newReceiver(t)
	allHook := h.createHook(map[string]any{"url": all.srv.URL})
	all.setSecrets(allHook.Secret)

	h.createCalendar("fb", "UTC") // calendar.updated
	h.book("fa", 1)
	h.book("fb", 2)
	bks := h.listAll("fb")
	h.mustStatus(h.do("DELETE", "/v1/calendars/fb/bookings/"+bks[0].ID, nil), http.StatusOK)
	start := time.Date(2030, 2, 1, 10, 0, 0, 0, time.UTC)
	r := h.do("POST", "/v1/calendars/fb/holds", bookingBody(start, time.Hour, "h"))
	h.mustStatus(r, http.StatusCreated)
	var hold booking
	r.json(t, &hold)
	h.mustStatus(h.do("POST", "/v1/calendars/fb/holds/"+hold.ID+"/confirm", nil), http.StatusOK)
	r = h.do("POST", "/v1/calendars/fb/bookings", bookingBody(start, time.Hour, "late"), "Idempotency-Key", "late-1")
	h.mustStatus(r, http.StatusConflict) // command.rejected: with a key it is logged

	queuetest.CheckFor(t, 20*time.Second, func() error {
		if k := all.count(func(delivery) bool { return true }); k < 7 {
			return fmt.Errorf("catch-all endpoint got %d", k)
		}
		return nil
	})
	var types []string
	for _, d := range all.deliveries() {
		types = append(types, d.Type)
	}
	wantAll := []string{"calendar.updated", "booking.confirmed", "booking.confirmed", "booking.cancelled", "hold.created", "booking.confirmed"}
	for _, w := range wantAll {
		if !slices.Contains(types, w) {
			t.Errorf("catch-all endpoint: no %s in %v", w, types)
		}
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		var got []string
		for _, d := range rcv.deliveries() {
			if d.Calendar != "fb" {
				return fmt.Errorf("delivery of calendar %q", d.Calendar)
			}
			got = append(got, d.Type)
		}
		if want := []string{"calendar.updated", "booking.cancelled", "hold.created"}; !slices.Equal(got, want) {
			return fmt.Errorf("filtered endpoint got %v, want %v", got, want)
		}
		return nil
	})
}

// TestWebhookCarriesSeries: a series is one delivery whose payload carries
// its series id and every occurrence; so is a cancel from an occurrence on.
func TestWebhookCarriesSeries(t *testing.T) {
	rcv := newReceiver(t)
	h := startHooks(t, "", fastHooks())
	h.createCalendar("sr", "UTC")
	hook := h.createHook(map[string]any{"url": rcv.srv.URL, "events": []string{"booking.confirmed", "booking.cancelled"}})
	rcv.setSecrets(hook.Secret)
	start := time.Date(2030, 3, 4, 9, 0, 0, 0, time.UTC)
	r := h.do("POST", "/v1/calendars/sr/bookings", map[string]any{"start": start.Format(time.RFC3339), "end": start.Add(time.Hour).Format(time.RFC3339),
		"customer": "Sam", "recurrence": map[string]any{"freq": "weekly", "count": 3}})
	h.mustStatus(r, http.StatusCreated)
	var series struct {
		SeriesID    string `json:"series_id"`
		Occurrences []struct {
			BookingID string `json:"booking_id"`
		} `json:"occurrences"`
	}
	r.json(t, &series)
	h.mustStatus(h.do("DELETE", "/v1/calendars/sr/bookings/"+series.Occurrences[1].BookingID+"?scope=following", nil), http.StatusOK)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		got := rcv.deliveries()
		if len(got) < 2 {
			return fmt.Errorf("%d deliveries", len(got))
		}
		if got[0].Type != "booking.confirmed" || got[0].SeriesID != series.SeriesID || got[0].Occurrences != 3 ||
			got[1].Type != "booking.cancelled" || got[1].SeriesID != series.SeriesID || got[1].Occurrences != 2 {
			return fmt.Errorf("deliveries %+v, want the series %s confirmed with 3 occurrences, then 2 cancelled", got, series.SeriesID)
		}
		return nil
	})
}

func testLogOut() io.Writer {
	if os.Getenv("WEBHOOK_TEST_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}

// TestWebhookAdmin: validation errors, disabling after the schedule with
// the reason and attempts shown, re-enabling, rotation (both secrets sign)
// and replay (the same ids again).
func TestWebhookAdmin(t *testing.T) {
	rcv := newReceiver(t)
	wc := fastHooks()
	wc.MaxAttempts = 3
	h := startHooks(t, "", wc)
	for _, tc := range []struct {
		body any
		code string
	}{
		{map[string]any{"url": "http://example.com/"}, "invalid_request"},
		{map[string]any{"url": "https://10.0.0.1/"}, "invalid_request"},
		{map[string]any{"url": rcv.srv.URL, "events": []string{"booking.moved"}}, "invalid_request"},
		{map[string]any{"url": rcv.srv.URL, "evnts": []string{}}, "invalid_request"},
		{map[string]any{"url": rcv.srv.URL, "calendars": []string{"a b"}}, "invalid_request"},
		{"not json", "invalid_request"},
	} {
		r := h.do("POST", "/v1/webhooks", tc.body)
		if r.Status != 400 || r.errorCode(t) != tc.code {
			t.Errorf("%v: %d %s", tc.body, r.Status, r.Body)
		}
	}
	if r := h.do("GET", "/v1/webhooks/wh_nope", nil); r.Status != 404 || r.errorCode(t) != "not_found" {
		t.Errorf("unknown id: %d %s", r.Status, r.Body)
	}
	hook := h.createHook(map[string]any{"url": rcv.srv.URL})
	rcv.setSecrets(hook.Secret)
	if r := h.do("POST", "/v1/webhooks/"+hook.ID+"/replay", nil); r.Status != 400 {
		t.Errorf("replay without from: %d", r.Status)
	}
	var list struct {
		Webhooks []hookView `json:"webhooks"`
	}
	h.do("GET", "/v1/webhooks", nil).json(t, &list)
	if len(list.Webhooks) != 1 || list.Webhooks[0].Secret != "" {
		t.Fatalf("list: %+v", list)
	}

	rcv.mode.Store("500")
	h.createCalendar("ad", "UTC")
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if v := h.getHook(hook.ID); v.Enabled || v.DisabledReason == "" || len(v.Status.Attempts) != 3 {
			return fmt.Errorf("not disabled yet: enabled=%v reason=%q attempts=%d", v.Enabled, v.DisabledReason, len(v.Status.Attempts))
		}
		return nil
	})
	rcv.mode.Store("ok")
	h.mustStatus(h.do("PATCH", "/v1/webhooks/"+hook.ID, map[string]any{"enabled": true}), http.StatusOK)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if k := rcv.count(func(d delivery) bool { return d.Status == 200 && d.Type == "calendar.created" }); k != 1 {
			return fmt.Errorf("%d deliveries after re-enabling", k)
		}
		return nil
	})

	r := h.do("POST", "/v1/webhooks/"+hook.ID+"/rotate-secret", nil)
	h.mustStatus(r, http.StatusOK)
	var rot hookView
	r.json(t, &rot)
	if rot.Secret == hook.Secret || len(rot.Secrets) != 2 || rot.Secrets[1]["expires_at"] == nil {
		t.Fatalf("rotation: %s", r.Body)
	}
	rcv.setSecrets(hook.Secret, rot.Secret) // each must verify on its own
	h.book("ad", 1)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if k := rcv.count(func(d delivery) bool { return d.Status == 200 && d.Signatures == 2 }); k < 1 {
			return fmt.Errorf("no delivery with two signatures")
		}
		return nil
	})
	before := rcv.count(func(d delivery) bool { return d.Status == 200 })
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	h.mustStatus(h.do("POST", "/v1/webhooks/"+hook.ID+"/replay?from="+from, nil), http.StatusAccepted)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if k := rcv.count(func(d delivery) bool { return d.Status == 200 }); k < 2*before {
			return fmt.Errorf("%d deliveries after the replay, want %d", k, 2*before)
		}
		return nil
	})
	ds := rcv.deliveries()
	ok := ds[:0]
	for _, d := range ds {
		if d.Status == 200 {
			ok = append(ok, d)
		}
	}
	for i := range before {
		if ok[i].ID != ok[before+i].ID {
			t.Errorf("replayed delivery %d has id %s, first %s", i, ok[before+i].ID, ok[i].ID)
		}
	}
	h.mustStatus(h.do("DELETE", "/v1/webhooks/"+hook.ID, nil), http.StatusNoContent)
	if r := h.do("GET", "/v1/webhooks/"+hook.ID, nil); r.Status != 404 {
		t.Errorf("after delete: %d", r.Status)
	}
}

// TestWebhookURLEmbeddedIPv4: creating or re-pointing an endpoint at an
// IPv6 form that carries a non-public IPv4 address, or at an IPv4 number
// not written as a dotted quad, is 400 invalid_request on the url field,
// even with 127.0.0.1 allow-listed; the public counterparts are saved.
func TestWebhookURLEmbeddedIPv4(t *testing.T) {
	rcv := newReceiver(t)
	h := startHooks(t, "", fastHooks()) // allow-lists 127.0.0.1
	hook := h.createHook(map[string]any{"url": rcv.srv.URL})
	for _, u := range []string{
		"https://[::127.0.0.1]/", "https://[2002:7f00:1::1]/", "https://[::ffff:0:127.0.0.1]/",
		"https://[64:ff9b::7f00:1]/", "https://[64:ff9b::a9fe:a9fe]/", "https://[64:ff9b:1::a00:1]/",
		"https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "https://[2001:0:a00:1:8000:63bf:f7f7:f7f7]/",
		"http://2130706433/", "http://0x7f.1/", "http://0177.0.0.1/", "http://127.1/", "https://127.0.0.1./",
		"https://[::ffff:10.0.0.1]/", "https://0xa9.0xfe.0xa9.0xfe/",
	} {
		for _, r := range []response{
			h.do("POST", "/v1/webhooks", map[string]any{"url": u}),
			h.do("PATCH", "/v1/webhooks/"+hook.ID, map[string]any{"url": u}),
		} {
			var e struct {
				Error struct {
					Code    string `json:"code"`
					Details []struct{ Field, Message string }
				} `json:"error"`
			}
			if r.Status != 400 {
				t.Errorf("%s: %d %s", u, r.Status, r.Body)
				continue
			}
			r.json(t, &e)
			if e.Error.Code != "invalid_request" || len(e.Error.Details) != 1 || e.Error.Details[0].Field != "url" {
				t.Errorf("%s: %s", u, r.Body)
			}
		}
	}
	if v := h.getHook(hook.ID); v.URL != rcv.srv.URL {
		t.Errorf("the endpoint was re-pointed to %s", v.URL)
	}
	for _, u := range []string{"https://[2002:808:808::1]/", "https://[64:ff9b::808:808]/", "https://[2001:0:4136:e378:8000:63bf:f7f7:f7f7]/"} {
		v := h.createHook(map[string]any{"url": u, "events": []string{"hold.expired"}, "calendars": []string{"nowhere"}})
		h.mustStatus(h.do("DELETE", "/v1/webhooks/"+v.ID, nil), http.StatusNoContent)
	}
}
