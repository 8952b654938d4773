package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
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

	"github.com/bookline/bookline/actor"
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

// ---- admin operations (the HTTP routes call these) ----

var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

func newID() (string, error) {
	b := make([]byte, 10)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "wh_" + idEncoding.EncodeToString(b), nil
}

// Limits of an endpoint's fields.
const (
	MaxDescription = 500
	MaxCalendars   = 100
)

func (m *Manager) checkURL(u string) error {
	if u == "" {
		return &endpoint.FieldError{Field: "url", Message: "is required"}
	}
	if err := m.cfg.Guard.CheckURL(u); err != nil {
		return &endpoint.FieldError{Field: "url", Message: err.Error()}
	}
	return nil
}

func checkEvents(evs []string) ([]string, error) {
	out := []string{}
	for _, e := range evs {
		if !slices.Contains(EventTypes, e) {
			return nil, &endpoint.FieldError{Field: "events", Message: fmt.Sprintf("unknown event type %q (known: %v)", e, EventTypes)}
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

func checkCalendars(cals []string) ([]string, error) {
	if len(cals) > MaxCalendars {
		return nil, &endpoint.FieldError{Field: "calendars", Message: fmt.Sprintf("at most %d calendars", MaxCalendars)}
	}
	out := []string{}
	for _, c := range cals {
		if !actor.ValidCalendarID(c) {
			return nil, &endpoint.FieldError{Field: "calendars", Message: fmt.Sprintf("calendar %q must match [A-Za-z0-9_-]{1,64}", c)}
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out) // the consumer's filter is compared as a set
	return out, nil
}

func checkDescription(d string) error {
	if len(d) > MaxDescription {
		return &endpoint.FieldError{Field: "description", Message: fmt.Sprintf("at most %d bytes", MaxDescription)}
	}
	return nil
}

// CreateWebhook stores a new endpoint with a fresh secret (returned in
// Secrets[0], the only time it is shown). It receives the events stored
// from now on.
func (m *Manager) CreateWebhook(ctx context.Context, in endpoint.Input) (endpoint.Endpoint, error) {
	if err := m.checkURL(in.URL); err != nil {
		return endpoint.Endpoint{}, err
	}
	evs, err := checkEvents(in.Events)
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	cals, err := checkCalendars(in.Calendars)
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	if err := checkDescription(in.Description); err != nil {
		return endpoint.Endpoint{}, err
	}
	id, err := newID()
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	secret, err := NewSecret()
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	s, err := m.cfg.JS.Stream(ctx, m.cfg.Stream)
	if err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("webhook: event stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("webhook: event stream: %w", err)
	}
	now := time.Now().UTC()
	ep := endpoint.Endpoint{ID: id, URL: in.URL, Events: evs, Calendars: cals, Description: in.Description,
		Enabled: in.Enabled == nil || *in.Enabled, CreatedAt: now, UpdatedAt: now,
		Secrets:  []endpoint.Secret{{Value: secret, CreatedAt: now}},
		StartSeq: info.State.LastSeq + 1}
	b, err := m.encode(ep)
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	if _, err := m.kv.Create(ctx, keyEndpoint+id, b); err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("webhook: store endpoint: %w", err)
	}
	return ep, nil
}

// ListWebhooks returns every endpoint, oldest first.
func (m *Manager) ListWebhooks(ctx context.Context) ([]endpoint.Endpoint, error) {
	lister, err := m.kv.ListKeysFiltered(ctx, keyEndpoint+"*")
	if err != nil {
		return nil, err
	}
	var ids []string
	for k := range lister.Keys() {
		ids = append(ids, k[len(keyEndpoint):])
	}
	out := []endpoint.Endpoint{}
	for _, id := range ids {
		ep, _, err := m.get(ctx, id)
		if errors.Is(err, endpoint.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ep)
	}
	slices.SortFunc(out, func(a, b endpoint.Endpoint) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

func (m *Manager) get(ctx context.Context, id string) (endpoint.Endpoint, uint64, error) {
	if !endpoint.ValidID(id) {
		return endpoint.Endpoint{}, 0, endpoint.ErrNotFound
	}
	e, err := m.kv.Get(ctx, keyEndpoint+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return endpoint.Endpoint{}, 0, endpoint.ErrNotFound
	}
	if err != nil {
		return endpoint.Endpoint{}, 0, err
	}
	ep, _, err := m.decode(id, e.Value())
	if err != nil {
		return endpoint.Endpoint{}, 0, err
	}
	return ep, e.Revision(), nil
}

// GetWebhook returns an endpoint and its delivery status.
func (m *Manager) GetWebhook(ctx context.Context, id string) (endpoint.Endpoint, endpoint.Status, error) {
	ep, _, err := m.get(ctx, id)
	if err != nil {
		return endpoint.Endpoint{}, endpoint.Status{}, err
	}
	st, err := m.status(ctx, id)
	return ep, st, err
}

func (m *Manager) status(ctx context.Context, id string) (endpoint.Status, error) {
	st := endpoint.Status{Attempts: []endpoint.Attempt{}}
	e, err := m.kv.Get(ctx, keyStatus+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return endpoint.Status{Attempts: []endpoint.Attempt{}}, nil // rewritten by the next attempt
	}
	if st.Attempts == nil {
		st.Attempts = []endpoint.Attempt{}
	}
	return st, nil
}

func (m *Manager) putStatus(ctx context.Context, id string, st endpoint.Status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = m.kv.Put(ctx, keyStatus+id, b)
	return err
}

// update changes endpoint id with fn under compare-and-set, retrying when
// another writer (an admin, a delivering instance) got there first.
func (m *Manager) update(ctx context.Context, id string, fn func(*endpoint.Endpoint) error) (endpoint.Endpoint, error) {
	for range 10 {
		ep, rev, err := m.get(ctx, id)
		if err != nil {
			return endpoint.Endpoint{}, err
		}
		if err := fn(&ep); err != nil {
			return endpoint.Endpoint{}, err
		}
		ep.UpdatedAt = time.Now().UTC()
		b, err := m.encode(ep)
		if err != nil {
			return endpoint.Endpoint{}, err
		}
		_, err = m.kv.Update(ctx, keyEndpoint+id, b, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return endpoint.Endpoint{}, endpoint.ErrNotFound
		}
		if err != nil {
			return endpoint.Endpoint{}, err
		}
		return ep, nil
	}
	return endpoint.Endpoint{}, errors.New("webhook: endpoint changed concurrently too often")
}

// UpdateWebhook applies a patch. Enabling an endpoint clears the reason
// bookline disabled it for, and it carries on from the event it stopped
// at.
func (m *Manager) UpdateWebhook(ctx context.Context, id string, p endpoint.Patch) (endpoint.Endpoint, error) {
	if p.URL != nil {
		if err := m.checkURL(*p.URL); err != nil {
			return endpoint.Endpoint{}, err
		}
	}
	var evs, cals []string
	var err error
	if p.Events != nil {
		if evs, err = checkEvents(*p.Events); err != nil {
			return endpoint.Endpoint{}, err
		}
	}
	if p.Calendars != nil {
		if cals, err = checkCalendars(*p.Calendars); err != nil {
			return endpoint.Endpoint{}, err
		}
	}
	if p.Description != nil {
		if err := checkDescription(*p.Description); err != nil {
			return endpoint.Endpoint{}, err
		}
	}
	ep, err := m.update(ctx, id, func(ep *endpoint.Endpoint) error {
		if p.URL != nil {
			ep.URL = *p.URL
		}
		if p.Events != nil {
			ep.Events = evs
		}
		if p.Calendars != nil {
			ep.Calendars = cals
		}
		if p.Description != nil {
			ep.Description = *p.Description
		}
		if p.Enabled != nil {
			ep.Enabled = *p.Enabled
			ep.DisabledReason, ep.DisabledAt = "", nil
		}
		return nil
	})
	if err == nil && p.Enabled != nil && *p.Enabled {
		// A fresh start of the schedule for the event that failed.
		if st, err := m.status(ctx, id); err == nil && st.FailingEvent != "" {
			st.Failures, st.NextAttempt = 0, nil
			_ = m.putStatus(ctx, id, st)
		}
	}
	return ep, err
}

// DeleteWebhook removes an endpoint, its status and its consumer.
func (m *Manager) DeleteWebhook(ctx context.Context, id string) error {
	ep, _, err := m.get(ctx, id)
	if err != nil {
		return err
	}
	if err := m.kv.Delete(ctx, keyEndpoint+id); err != nil {
		return err
	}
	_ = m.kv.Delete(ctx, keyStatus+id)
	m.deleteConsumer(ctx, ep.ID, ep.Generation)
	return nil
}

func (m *Manager) deleteConsumer(ctx context.Context, id string, gen int) {
	err := m.cfg.JS.DeleteConsumer(ctx, m.cfg.Stream, consumerName(id, gen))
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		m.log.Warn("deleting a webhook consumer", "consumer", consumerName(id, gen), "err", err)
	}
}

// RotateWebhookSecret puts a new secret first; the current ones sign on
// for RotationGrace. The new secret is Secrets[0] of the answer.
func (m *Manager) RotateWebhookSecret(ctx context.Context, id string) (endpoint.Endpoint, error) {
	secret, err := NewSecret()
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	return m.update(ctx, id, func(ep *endpoint.Endpoint) error {
		now := time.Now().UTC()
		until := now.Add(m.cfg.RotationGrace)
		kept := []endpoint.Secret{{Value: secret, CreatedAt: now}}
		for _, s := range ep.Secrets {
			if s.ExpiresAt != nil && !now.Before(*s.ExpiresAt) {
				continue // expired
			}
			if s.ExpiresAt == nil || s.ExpiresAt.After(until) {
				s.ExpiresAt = &until
			}
			kept = append(kept, s)
		}
		ep.Secrets = kept
		return nil
	})
}

// ReplayWebhook re-delivers the events stored since from: the endpoint
// gets a new consumer generation starting there (what the old one had not
// delivered yet is part of it).
func (m *Manager) ReplayWebhook(ctx context.Context, id string, from time.Time) (endpoint.Endpoint, error) {
	if from.After(time.Now()) {
		return endpoint.Endpoint{}, &endpoint.FieldError{Field: "from", Message: "is in the future"}
	}
	var old int
	ep, err := m.update(ctx, id, func(ep *endpoint.Endpoint) error {
		old = ep.Generation
		ep.Generation++
		f := from.UTC()
		ep.ReplayFrom = &f
		return nil
	})
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	m.deleteConsumer(ctx, id, old)
	if st, err := m.status(ctx, id); err == nil && st.FailingEvent != "" {
		st.FailingEvent, st.Failures, st.FailingSince, st.NextAttempt = "", 0, nil, nil
		_ = m.putStatus(ctx, id, st)
	}
	return ep, nil
}
