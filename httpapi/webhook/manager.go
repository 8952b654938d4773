package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/data/secretkey"
	"github.com/bookline/bookline/httpapi/webhook/endpoint"
)

// BucketName is the KV bucket of endpoint configurations and statuses.
const BucketName = "BOOKLINE_WEBHOOKS"

// KV keys: "ep.<id>" holds an Endpoint, "st.<id>" its Status.
const (
	keyEndpoint = "ep."
	keyStatus   = "st."
)

// ConsumerPrefix starts the name of every endpoint's durable consumer on
// the event stream: <prefix><id>-<generation>.
const ConsumerPrefix = "bookline-webhook-"

// PriorityGroup is the consumer priority group every instance pulls in.
const PriorityGroup = "deliverer"

// Defaults of Config.
const (
	DefaultAttemptTimeout = 15 * time.Second
	DefaultRetryBase      = 5 * time.Second
	DefaultRetryCap       = 12 * time.Hour
	DefaultMaxAttempts    = 15
	DefaultRotationGrace  = 24 * time.Hour
	DefaultPinnedTTL      = 5 * time.Second
	// ackWait is how long NATS waits for an ack before redelivering: the
	// loop says "in progress" every quarter of it while an event is held
	// (in an attempt or waiting for the next; lease.go), so only an
	// instance that died, stopped or lost NATS lets it lapse. It is short
	// because a handed-back event (nak) of a pinned consumer was seen to
	// wait for it anyway.
	ackWait = 10 * time.Second
)

// Config configures a Manager.
type Config struct {
	JS jetstream.JetStream
	// Stream is the outcome event stream (BOOKLINE_EVT), whose subjects
	// are SubjectPrefix + calendar id.
	Stream        string
	SubjectPrefix string
	// BatchSubjectPrefix, when set, is the prefix of the event stream's
	// batch subjects (<prefix><partition>; docs/protocol.md section 11,
	// "Event batches"), whose messages carry the events of many
	// calendars, one line each: their events are delivered as the same
	// events alone would be. PartitionOf, when set, names the partition
	// whose batch subject carries a calendar's events, so that an
	// endpoint of a few calendars reads only those; without it every
	// batch subject is read.
	BatchSubjectPrefix string
	PartitionOf        func(calendar string) int
	// Replicas of the KV bucket when it is created (like the streams').
	Replicas int
	// EnsureBucket, when set, opens or creates the KV bucket instead of
	// the plain lookup-then-create (the queue's, which retries what a
	// cluster that is still settling refuses and checks the replicas of
	// an existing bucket).
	EnsureBucket func(context.Context, jetstream.KeyValueConfig) (jetstream.KeyValue, error)
	// Guard checks URLs and makes the delivery client (nil: no
	// allow-list).
	Guard  *Guard
	Logger *slog.Logger
	// PinnedTTL is how long the consumer of an endpoint stays with an
	// instance that stopped pulling (default DefaultPinnedTTL).
	PinnedTTL time.Duration
	// AttemptTimeout bounds one delivery attempt (connect, send, answer).
	AttemptTimeout time.Duration
	// RetryBase, RetryCap and MaxAttempts make the retry schedule: the
	// wait after failed attempt n is RetryBase·3^(n-1), at most RetryCap,
	// ±10% jitter; after MaxAttempts failed attempts of one event the
	// endpoint is disabled. The defaults (5s, 12h, 15) spread 15 attempts
	// over about 3.1 days.
	RetryBase, RetryCap time.Duration
	MaxAttempts         int
	// RotationGrace is how long a replaced secret keeps signing.
	RotationGrace time.Duration
	// Key seals the signing secrets in the KV bucket (seal.go). Without
	// it they are stored in the clear (tests only: cmd/bookline always
	// gives one).
	Key *secretkey.Key
}

// Backoff is the wait after failed attempt n (1-based), without jitter.
func (c *Config) Backoff(n int) time.Duration {
	d := float64(c.RetryBase) * math.Pow(3, float64(n-1))
	if d > float64(c.RetryCap) {
		return c.RetryCap
	}
	return time.Duration(d)
}

// jittered spreads d by ±10% so that endpoints failing together do not
// retry together.
func jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*mrand.Float64()))
}

// Manager keeps the endpoints in the KV bucket and runs their delivery
// loops.
type Manager struct {
	cfg    Config
	kv     jetstream.KeyValue
	log    *slog.Logger
	client *http.Client

	mu     sync.Mutex
	loops  map[string]*loop
	known  map[string]*endpoint.Endpoint // every endpoint seen by the watch
	stats  map[string]*counters
	closed bool
}

type counters struct {
	delivered uint64
	failed    map[string]uint64 // by reason
}

// Open makes sure the KV bucket exists and returns a Manager; Run starts
// delivering.
func Open(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.JS == nil || cfg.Stream == "" || cfg.SubjectPrefix == "" {
		return nil, errors.New("webhook: JetStream, Stream and SubjectPrefix are required")
	}
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Guard == nil {
		cfg.Guard = &Guard{hosts: map[string]bool{}}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.PinnedTTL, DefaultPinnedTTL)
	def(&cfg.AttemptTimeout, DefaultAttemptTimeout)
	def(&cfg.RetryBase, DefaultRetryBase)
	def(&cfg.RetryCap, DefaultRetryCap)
	def(&cfg.RotationGrace, DefaultRotationGrace)
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	bucket := jetstream.KeyValueConfig{
		Bucket:      BucketName,
		Description: "bookline webhook endpoints (ep.<id>) and their delivery status (st.<id>)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	}
	var kv jetstream.KeyValue
	var err error
	if cfg.EnsureBucket != nil {
		kv, err = cfg.EnsureBucket(ctx, bucket)
	} else {
		kv, err = cfg.JS.KeyValue(ctx, BucketName)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = cfg.JS.CreateKeyValue(ctx, bucket)
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = cfg.JS.KeyValue(ctx, BucketName)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("webhook: kv bucket %s: %w", BucketName, err)
	}
	m := &Manager{cfg: cfg, kv: kv, log: cfg.Logger.With("component", "webhooks"),
		client: cfg.Guard.Client(cfg.AttemptTimeout),
		loops:  map[string]*loop{}, known: map[string]*endpoint.Endpoint{}, stats: map[string]*counters{}}
	if err := m.checkKey(ctx); err != nil {
		return nil, err
	}
	if err := m.sealPlaintext(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// Run watches the endpoints and runs one delivery loop per enabled
// endpoint until ctx ends; it then stops the loops (an event held is
// handed back to NATS at once).
func (m *Manager) Run(ctx context.Context) {
	defer m.stopAll()
	for ctx.Err() == nil {
		if err := m.watch(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("watching webhook endpoints", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (m *Manager) watch(ctx context.Context) error {
	w, err := m.kv.Watch(ctx, keyEndpoint+"*")
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watch ended")
			}
			if e == nil {
				continue // the initial values are all in
			}
			id := e.Key()[len(keyEndpoint):]
			if e.Operation() != jetstream.KeyValuePut {
				m.apply(ctx, id, nil)
				continue
			}
			ep, _, err := m.decode(id, e.Value())
			if err != nil {
				m.log.Error("undecodable webhook endpoint in the KV bucket", "key", e.Key(), "err", err)
				continue
			}
			m.apply(ctx, id, &ep)
		}
	}
}

// apply starts, updates or stops the loop of endpoint id (ep nil: deleted).
func (m *Manager) apply(ctx context.Context, id string, ep *endpoint.Endpoint) {
	m.mu.Lock()
	if ep == nil {
		delete(m.known, id)
		delete(m.stats, id)
	} else {
		m.known[id] = ep
	}
	l := m.loops[id]
	closed := m.closed
	m.mu.Unlock()
	if l != nil && ep != nil && ep.Enabled && l.gen == ep.Generation && slices.Equal(l.calendars, ep.Calendars) {
		l.ep.Store(ep) // url, secrets, event types: from the next attempt on
		return
	}
	if l != nil {
		l.stop()
		m.mu.Lock()
		if m.loops[id] == l {
			delete(m.loops, id)
		}
		m.mu.Unlock()
	}
	if ep == nil || !ep.Enabled || closed {
		return
	}
	nl := newLoop(m, ep)
	m.mu.Lock()
	m.loops[id] = nl
	m.mu.Unlock()
	nl.start(ctx)
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	m.closed = true
	loops := m.loops
	m.loops = map[string]*loop{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.stop()
		}()
	}
	wg.Wait()
}

// consumerName is the durable consumer of ep's current generation.
func consumerName(id string, gen int) string { return ConsumerPrefix + id + "-" + strconv.Itoa(gen) }

// Stats samples every endpoint: this instance's counters and the lag of
// its consumer.
func (m *Manager) Stats(ctx context.Context) []endpoint.Stat {
	m.mu.Lock()
	eps := make([]endpoint.Endpoint, 0, len(m.known))
	for _, ep := range m.known {
		eps = append(eps, *ep)
	}
	out := make([]endpoint.Stat, 0, len(eps))
	for _, ep := range eps {
		s := endpoint.Stat{ID: ep.ID, Enabled: ep.Enabled, Lag: -1, Failed: map[string]uint64{}}
		if c := m.stats[ep.ID]; c != nil {
			s.Delivered = c.delivered
			for k, v := range c.failed {
				s.Failed[k] = v
			}
		}
		out = append(out, s)
	}
	m.mu.Unlock()
	for i := range out {
		ep := eps[i]
		c, err := m.cfg.JS.Consumer(ctx, m.cfg.Stream, consumerName(ep.ID, ep.Generation))
		if err != nil {
			continue
		}
		if info, err := c.Info(ctx); err == nil {
			out[i].Lag = int64(info.NumPending) + int64(info.NumAckPending)
		}
	}
	slices.SortFunc(out, func(a, b endpoint.Stat) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return out
}

func (m *Manager) count(id string, ok bool, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.stats[id]
	if c == nil {
		c = &counters{failed: map[string]uint64{}}
		m.stats[id] = c
	}
	if ok {
		c.delivered++
	} else {
		c.failed[reason]++
	}
}
