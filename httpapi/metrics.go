package httpapi

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Metrics is bookline's Prometheus registry: HTTP requests, decided
// commands, partition batches and, once a node is attached, samples of the
// partition writers, the outbox and the index's group commits taken at
// scrape time. It implements queue.Observer.
type Metrics struct {
	reg *prometheus.Registry

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	commands     *prometheus.CounterVec
	refused      *prometheus.CounterVec // answered from the index, not logged
	batchSize    *prometheus.HistogramVec
	applyLatency *prometheus.HistogramVec
	eventFails   *prometheus.CounterVec
	syncFails    *prometheus.CounterVec // Google Calendar sync
	logSync      *prometheus.HistogramVec
	storageFails *prometheus.CounterVec
	snapshots    prometheus.Histogram
	snapshotSize prometheus.Gauge
	snapshotAt   prometheus.Gauge

	attach       sync.Once
	attachGoogle sync.Once
}

// OutboxDepthCap bounds how many outbox entries a scrape counts.
const OutboxDepthCap = 10000

// NewMetrics creates the registry with the Go runtime and process
// collectors and bookline's own metrics.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bookline_http_requests_total",
		Help: "HTTP requests answered, by method, route pattern and status.",
	}, []string{"method", "route", "status"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "bookline_http_request_duration_seconds",
		Help:    "Time to answer HTTP requests, by method, route pattern and status.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"method", "route", "status"})
	m.commands = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bookline_commands_total",
		Help: "Commands decided by the partition writers (redeliveries excluded), by type, outcome (accepted, rejected) and reason (the rejection code, none when accepted).",
	}, []string{"type", "outcome", "reason"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bookline_refused_from_index_total",
		Help: "Bookings and holds without an Idempotency-Key that the committed index already refused, answered without logging a command (not in bookline_commands_total nor in the event stream), by type and reason.",
	}, []string{"type", "reason"})
	m.batchSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "bookline_partition_batch_size",
		Help:    "Messages applied per committed batch, by partition.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}, // up to the writers' largest batch
	}, []string{"partition"})
	m.applyLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "bookline_partition_apply_latency_seconds",
		Help:    "Per batch, time from the newest command of the batch being stored in the stream to the batch being committed, answered and acked, by partition (grows with the backlog).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"partition"})
	m.eventFails = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bookline_event_publish_failures_total",
		Help: "Failed attempts to publish outbox entries to the event stream, by reason (timeout, no_stream, connection, backpressure, other).",
	}, []string{"reason"})
	m.syncFails = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bookline_calendar_sync_failures_total",
		Help: "Failed Google Calendar calls of the sync, by reason (rate_limited, quota_exceeded, server_error, timeout, network, unauthorized, invalid_grant, forbidden, calendar_not_found, credentials, bad_request, precondition_failed, other).",
	}, []string{"reason"})
	m.logSync = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "bookline_log_sync_duration_seconds",
		Help:    "fdatasyncs of an embedded stream's new messages (default --sync always): one per group of commits waiting for it; its count is the number of syncs.",
		Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .5},
	}, []string{"stream"})
	m.storageFails = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bookline_storage_write_failures_total",
		Help: "Writes that failed for storage reasons (a full disk or quota, an I/O error), by component: index (a commit of the bbolt index) or nats (the embedded NATS server's store: a stream found unable to write, the store over its limit, a publish refused for lack of room). While any fails, bookline_storage_failing is 1 and /readyz answers 503 with the reason.",
	}, []string{"component"})
	for _, c := range storageComponents {
		m.storageFails.WithLabelValues(c) // present from the start, at 0
	}
	m.snapshots = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "bookline_snapshot_duration_seconds",
		Help:    "index snapshots this instance took (copy, upload, pruning and trimming); its count is the number taken.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	m.snapshotSize = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bookline_snapshot_bytes", Help: "size of the last index snapshot this instance took.",
	})
	m.snapshotAt = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bookline_snapshot_last_timestamp_seconds", Help: "when this instance last took an index snapshot (Unix time).",
	})
	m.reg.MustRegister(m.syncFails, m.logSync, m.storageFails, m.snapshots, m.snapshotSize, m.snapshotAt)
	m.reg.MustRegister(m.httpRequests, m.httpDuration, m.commands, m.refused, m.batchSize, m.applyLatency, m.eventFails,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the underlying registry (to add collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// PartitionSample is what the metrics show of one partition writer.
type PartitionSample struct {
	Partition  int
	AppliedSeq uint64
	CaughtUp   bool
	// Stalled: the writer stopped for good (a command of a newer schema).
	Stalled bool
	// HistoryMismatch: the partition is not served because the log's
	// history differs from what its index applied.
	HistoryMismatch bool
	// Active: this instance pulls the partition and sends its side
	// effects.
	Active bool
	// NumPending and NumAckPending are the log's messages of the
	// partition not yet delivered to the writer, and those delivered but
	// not acknowledged; -1 when they could not be read.
	NumPending, NumAckPending int64
}

// NodeSampler is what the metrics read from the writers at every scrape
// (cmd/bookline adapts queue.Node to it).
type NodeSampler interface {
	PartitionSamples(ctx context.Context) []PartitionSample
	OutboxDepth(max int) (int, error)
	CommitStats() data.CommitStats
	Ready() error
	View(fn func(*data.Tx) error) error
	// StorageFailing says, per storage component, whether a write path
	// of it fails for storage reasons now.
	StorageFailing() map[string]bool
	// DurabilityReporter gives bookline_nats_lazy_sync.
	DurabilityReporter
}

// storageComponents are the component labels of the storage metrics (the
// queue's StorageIndex and StorageNATS).
var storageComponents = []string{"index", "nats"}

// AttachNode registers the collectors sampled from a running node at each
// scrape: per-partition applied sequence, catch-up state and consumer
// pending counts, the outbox depth, the index's group-commit counters and
// readiness. Only the first call has an effect.
func (m *Metrics) AttachNode(n NodeSampler) {
	m.attach.Do(func() { m.reg.MustRegister(&nodeCollector{n: n}) })
}

// labelSafe accepts the writer's own type names and rejection codes
// (lower case, '_' and '.'), which keeps label values bounded to what the
// actor defines: anything else becomes "other"/"invalid".
func labelSafe(s string) bool {
	if len(s) == 0 || len(s) > 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if ch := s[i]; !('a' <= ch && ch <= 'z' || ch == '_' || ch == '.') {
			return false
		}
	}
	return true
}

// ObserveBatch implements queue.Observer: one committed batch of a
// partition, what its writer decoded (in) and decided (out), and when it
// was done.
func (m *Metrics) ObserveBatch(partition int, in []actor.Decoded, out []actor.Output, done time.Time) {
	part := strconv.Itoa(partition)
	m.batchSize.WithLabelValues(part).Observe(float64(len(out)))
	var newest time.Time
	for i := range in {
		if in[i].At.After(newest) {
			newest = in[i].At
		}
	}
	if !newest.IsZero() {
		m.applyLatency.WithLabelValues(part).Observe(max(0, done.Sub(newest).Seconds()))
	}
	for i, o := range out {
		if o.Skipped || o.Decision == nil || i >= len(in) {
			continue
		}
		// A valid command's type was checked by the actor. A rejected
		// message's type is the sender's text: trusted only when the
		// rejection is not invalid_command (unknown type, undecodable).
		typ := in[i].Cmd.Type
		if r := in[i].Reject; r != nil {
			typ = r.Type
			if r.Code == actor.CodeInvalidCommand {
				typ = "invalid"
			}
		}
		if !labelSafe(typ) {
			typ = "invalid"
		}
		outcome, reason := decisionOutcome(o.Decision)
		m.commands.WithLabelValues(typ, outcome, reason).Inc()
	}
}

// decisionOutcome is the outcome and reason labels of a decided reply.
func decisionOutcome(r *actor.Reply) (outcome, reason string) {
	switch r.Outcome {
	case actor.OutcomeAccepted:
		return r.Outcome, "none"
	case actor.OutcomeRejected:
		if !labelSafe(r.Code) {
			return r.Outcome, "other"
		}
		return r.Outcome, r.Code
	}
	return "unknown", "other"
}

// EventPublishFailed implements queue.Observer.
func (m *Metrics) EventPublishFailed(reason string) {
	m.eventFails.WithLabelValues(reason).Inc()
}

// LogSynced implements queue.Observer.
func (m *Metrics) LogSynced(stream string, took time.Duration) {
	m.logSync.WithLabelValues(stream).Observe(took.Seconds())
}

// StorageWriteFailed implements queue.Observer.
func (m *Metrics) StorageWriteFailed(component string) {
	m.storageFails.WithLabelValues(component).Inc()
}

// SnapshotTaken records an index snapshot this instance took.
func (m *Metrics) SnapshotTaken(si data.SnapshotInfo, took time.Duration) {
	m.snapshots.Observe(took.Seconds())
	m.snapshotSize.Set(float64(si.Size))
	m.snapshotAt.Set(float64(si.TakenAt.UnixNano()) / 1e9)
}

// observeHTTP records one answered request.
func (m *Metrics) observeHTTP(method, route string, status int, d time.Duration) {
	st := strconv.Itoa(status)
	m.httpRequests.WithLabelValues(method, route, st).Inc()
	m.httpDuration.WithLabelValues(method, route, st).Observe(d.Seconds())
}

// handler serves the registry in the Prometheus exposition format.
func (m *Metrics) handler() fiber.Handler {
	return adaptor.HTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
}

// nodeCollector samples a node at scrape time.
type nodeCollector struct{ n NodeSampler }

var (
	descApplied = prometheus.NewDesc("bookline_partition_applied_sequence",
		"Last command stream sequence the partition applied.", []string{"partition"}, nil)
	descCaughtUp = prometheus.NewDesc("bookline_partition_caught_up",
		"1 once the partition has applied what the stream held when its writer started.", []string{"partition"}, nil)
	descStalled = prometheus.NewDesc("bookline_partition_stalled",
		"1 when the partition's writer stopped at a command of a schema version this build does not know: nothing after it is decided until bookline is upgraded (/readyz and the error log say which).", []string{"partition"}, nil)
	descHistoryMismatch = prometheus.NewDesc("bookline_history_mismatch",
		"1 when the partition is not served because the command stream's history differs from what its index applied (a message it applied is missing or another one; /readyz and the error log name the first differing sequence and what to do).", []string{"partition"}, nil)
	descPending = prometheus.NewDesc("bookline_partition_consumer_pending",
		"The partition consumer's NumPending: commands in the stream not yet delivered to the writer (lag).", []string{"partition"}, nil)
	descAckPending = prometheus.NewDesc("bookline_partition_consumer_ack_pending",
		"The partition consumer's NumAckPending: commands delivered to the writer and not yet acknowledged.", []string{"partition"}, nil)
	descActive = prometheus.NewDesc("bookline_partition_active",
		"1 while this instance pulls the partition and sends its outcome events and Google mirror operations (always 1 outside a cluster; in a cluster the partitions are spread over the live instances).", []string{"partition"}, nil)
	descOutbox = prometheus.NewDesc("bookline_outbox_pending_events",
		"Outcome events in the outbox: not yet published to the event stream, or published less than about 250 ms ago (their deletions are batched; counted up to 10000).", nil, nil)
	descCommits = prometheus.NewDesc("bookline_index_commits_total",
		"bbolt read-write transactions committed by the group commit (fsynced only in cluster mode: with the embedded server the stream is the durable record).", nil, nil)

	descCommitCalls = prometheus.NewDesc("bookline_index_commit_calls_total",
		"Store.Commit calls carried by those transactions.", nil, nil)
	descCommitSeconds = prometheus.NewDesc("bookline_index_commit_seconds_total",
		"Time spent in bbolt's Commit (page writes and fsync).", nil, nil)
	descReady = prometheus.NewDesc("bookline_ready",
		"1 when NATS is connected, every partition has caught up and the index is open.", nil, nil)
	descLazySync = prometheus.NewDesc("bookline_nats_lazy_sync",
		"1 when answered commands may be lost to a power cut of the NATS servers: in cluster mode a server acknowledges before it syncs, or its settings were not checked (--allow-lazy-nats-sync); with the embedded server --sync interval. /readyz says which (check nats_durability).", nil, nil)
	descStorageFailing = prometheus.NewDesc("bookline_storage_failing",
		"1 while a write path of the component (index, nats) fails for storage reasons (see bookline_storage_write_failures_total); writes are refused with 503 meanwhile and resume by themselves once there is room.", []string{"component"}, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descApplied, descCaughtUp, descStalled, descHistoryMismatch, descPending, descAckPending, descActive, descOutbox, descCommits, descCommitCalls, descCommitSeconds, descReady, descStorageFailing, descLazySync} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, st := range c.n.PartitionSamples(ctx) {
		p := strconv.Itoa(st.Partition)
		ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(st.AppliedSeq), p)
		ch <- prometheus.MustNewConstMetric(descCaughtUp, prometheus.GaugeValue, b2f(st.CaughtUp), p)
		ch <- prometheus.MustNewConstMetric(descStalled, prometheus.GaugeValue, b2f(st.Stalled), p)
		ch <- prometheus.MustNewConstMetric(descHistoryMismatch, prometheus.GaugeValue, b2f(st.HistoryMismatch), p)
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, b2f(st.Active), p)
		if st.NumPending >= 0 {
			ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(st.NumPending), p)
			ch <- prometheus.MustNewConstMetric(descAckPending, prometheus.GaugeValue, float64(st.NumAckPending), p)
		}
	}
	if depth, err := c.n.OutboxDepth(OutboxDepthCap); err == nil {
		ch <- prometheus.MustNewConstMetric(descOutbox, prometheus.GaugeValue, float64(depth))
	}
	cs := c.n.CommitStats()
	ch <- prometheus.MustNewConstMetric(descCommits, prometheus.CounterValue, float64(cs.Commits))
	ch <- prometheus.MustNewConstMetric(descCommitCalls, prometheus.CounterValue, float64(cs.Calls))
	ch <- prometheus.MustNewConstMetric(descCommitSeconds, prometheus.CounterValue, cs.InCommit.Seconds())
	ready := c.n.Ready() == nil && c.n.View(func(*data.Tx) error { return nil }) == nil
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, b2f(ready))
	lazy, _ := c.n.NATSDurability()
	ch <- prometheus.MustNewConstMetric(descLazySync, prometheus.GaugeValue, b2f(lazy))
	for component, failing := range c.n.StorageFailing() {
		ch <- prometheus.MustNewConstMetric(descStorageFailing, prometheus.GaugeValue, b2f(failing), component)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// AttachGoogle registers the gauge of the Google sync's dead letters,
// read from deadLetters at each scrape (counted up to OutboxDepthCap).
// Only the first call has an effect.
func (m *Metrics) AttachGoogle(deadLetters func(max int) int) {
	m.attachGoogle.Do(func() {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bookline_calendar_sync_dead_letters",
			Help: "Google mirror operations set aside after Google refused them repeatedly (all calendars; see GET /v1/admin/calendars/{id}/google/dead-letters).",
		}, func() float64 { return float64(deadLetters(OutboxDepthCap)) }))
	})
}

// CalendarSyncFailed counts a failed Google Calendar call (the process
// hands it to the Google sync as its failure hook).
func (m *Metrics) CalendarSyncFailed(reason string) {
	m.syncFails.WithLabelValues(reason).Inc()
}
