package calendarsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/secretkey"
)

// Publisher sends a command through the log and returns once it is decided
// (queue.Node wires Client.Submit here). An error means it may not have
// been applied; a rejected command is an error too.
type Publisher func(ctx context.Context, cmd *actor.Command) error

// Config configures a Syncer. Zero values take the defaults.
type Config struct {
	// Provider creates the client of the external calendars' service;
	// nil (with Service nil) means no credentials are configured: linked
	// calendars are reported degraded and no provider is ever called.
	Provider ProviderFunc
	// Service, when Provider is nil, creates a Google client: Provider is
	// then GoogleProvider(Service).
	Service ServiceFunc
	// BusyInterval is how often busy time is read from Google (default
	// 5m; negative: only on demand).
	BusyInterval time.Duration
	// Horizon is how far ahead busy time is read when the calendar has no
	// horizon_days rule (default 90 days).
	Horizon time.Duration
	// FullResyncEvery forces a full read instead of an incremental one
	// (default 1h), so events that move into the horizon are seen.
	FullResyncEvery time.Duration
	// CallTimeout bounds one Google call (default 30s).
	CallTimeout time.Duration
	// RetryBase and RetryMax bound the backoff of transient failures
	// (defaults 250ms, 30s); PauseBase and PauseMax that of a degraded link
	// (defaults 1m, 10m).
	RetryBase, RetryMax time.Duration
	PauseBase, PauseMax time.Duration
	// QuotaPauseBase and QuotaPauseMax bound the wait after Google
	// answered quotaExceeded or dailyLimitExceeded (defaults 15m, 2h; a
	// longer Retry-After wins). Those are usage limits of the credential:
	// every call waits, not only the calendar's.
	QuotaPauseBase, QuotaPauseMax time.Duration
	// EntryAttempts is how often one mirror operation is tried when Google
	// refuses it for a reason of its own (not of the link: a 400, a 403 on
	// an event its owner deleted, a duplicate that is not there) before it
	// is set aside as a dead letter and the calendar's next operations go
	// on (default 5).
	EntryAttempts int
	// RequestsPerMinute bounds the calls of all calendars together, under
	// Google's per-user quota (about 600/min) (default 500; negative: no
	// limit).
	RequestsPerMinute int
	// WebhookURL, when set, is the public URL of the API's Google
	// notification route (POST /v1/google/notifications): busy-synced
	// calendars get push channels (events.watch) whose notifications make
	// their busy time be read at once. Polling goes on as the fallback.
	WebhookURL string
	// Channels, with Key, keeps the push channels where the next start and
	// the other instances of a cluster find them (channels.go; bookline
	// wires a NATS KV bucket), their tokens sealed with Key: a
	// notification for a channel made before a restart, or by another
	// instance, is recognised. Without both, channels live in memory.
	Channels ChannelStore
	Key      *secretkey.Key
	// CatchUp, when set, brings this instance's index up to calendar
	// cal's last logged command (in a cluster: Node.SyncCalendar) before
	// a notification is acted on here for a calendar another instance
	// owns, whose index copy may lag.
	CatchUp func(ctx context.Context, cal string) error
	// ChannelTTL is the lifetime asked for push channels (default 24h);
	// they are renewed at four fifths of it. WatchCheckEvery is how often
	// channels are checked (made, renewed, stopped) (default 1m).
	ChannelTTL, WatchCheckEvery time.Duration
	// FreeBusyTimeout bounds the freebusy.query made before a booking of a
	// calendar whose link asks for it (default 3s).
	FreeBusyTimeout time.Duration
	// Batch is how many outbox entries are read at a time (default 64).
	Batch  int
	Logger *slog.Logger
	// OnFailure, when set, is told the reason of every failed Google call
	// (metrics).
	OnFailure func(reason string)
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Owns, when set, says whether this instance mirrors calendar cal and
	// reads its busy time now (in a cluster: while it owns the calendar's
	// partition). Others keep the calendar's queued operations until
	// Progress says Google has them. Nil: every calendar.
	Owns func(cal string) bool
	// Progress, when set, shares with the other instances how far Google
	// confirmed each calendar's operations, so that a new owner goes on
	// from there, in order.
	Progress Progress
	// Fence, when set, is asked immediately before each mirror call of
	// calendar cal (in a cluster: Node.FenceCalendar, the partition's
	// ownership epoch). It returns the latest time the call may still run
	// (zero: no bound), or an error: this instance must not call for the
	// calendar now, and its drainer stops. A call in flight on an old
	// owner thus cannot outlast the moment the new owner makes its first.
	Fence func(ctx context.Context, cal string) (time.Time, error)
}

// Progress records, for every instance to read, the stream sequence up to
// which Google confirmed a calendar's mirror operations.
type Progress interface {
	MirrorConfirmed(ctx context.Context, cal string) (uint64, error)
	ConfirmMirror(ctx context.Context, cal string, seq uint64) error
}

// owns reports whether this instance works on calendar cal now.
func (c *Config) owns(cal string) bool { return c.Owns == nil || c.Owns(cal) }

func (c *Config) defaults() {
	if c.Provider == nil && c.Service != nil {
		c.Provider = GoogleProvider(c.Service)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.BusyInterval, 5*time.Minute)
	def(&c.Horizon, 90*24*time.Hour)
	def(&c.FullResyncEvery, time.Hour)
	def(&c.CallTimeout, 30*time.Second)
	def(&c.RetryBase, 250*time.Millisecond)
	def(&c.RetryMax, 30*time.Second)
	def(&c.PauseBase, time.Minute)
	def(&c.PauseMax, 10*time.Minute)
	def(&c.QuotaPauseBase, 15*time.Minute)
	def(&c.QuotaPauseMax, 2*time.Hour)
	def(&c.ChannelTTL, 24*time.Hour)
	def(&c.WatchCheckEvery, time.Minute)
	def(&c.FreeBusyTimeout, 3*time.Second)
	if c.EntryAttempts <= 0 {
		c.EntryAttempts = 5
	}
	if c.RequestsPerMinute == 0 {
		c.RequestsPerMinute = 500
	}
	if c.Batch <= 0 {
		c.Batch = 64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Link statuses.
const (
	StatusOK       = "ok"
	StatusDegraded = "degraded"
	// StatusThrottled: Google's usage quota is spent; every call waits
	// until throttled_until.
	StatusThrottled = "throttled"
)

// linkState is the in-memory state of one bookline calendar's link.
type linkState struct {
	degraded    bool
	reason      string
	lastSync    time.Time
	failures    map[string]uint64
	wake        chan struct{} // cuts a pause short (admin sync)
	busy        sync.Mutex    // serialises busy reads of the calendar
	syncToken   string        // guarded by busy
	tokenFor    string        // Google calendar the token belongs to
	lastFull    time.Time
	attempted   bool      // a busy read was tried (guarded by busy)
	windowEnd   time.Time // end of the read window of the last full read
	pausedUntil time.Time
	again       atomic.Bool // a change was notified during a read: read once more
	// push is the state of the calendar's push channel (PushActive,
	// PushPolling, "" without one); watchRetryAt and watchFails pace new
	// watch attempts after failures.
	push         string
	watchRetryAt time.Time
	watchFails   int
}

// Syncer runs the mirror and the busy-time import. Create it with New and
// run it with Run; its methods are safe for concurrent use.
type Syncer struct {
	cfg     Config
	store   *data.Store
	publish Publisher
	log     *slog.Logger
	kick    chan struct{}

	mu      sync.Mutex
	links   map[string]*linkState
	running map[string]bool // calendars with a drainer
	// pruned is when the queued operations of a calendar owned elsewhere
	// were last dropped up to the confirmed sequence.
	pruned map[string]time.Time
	prov   Provider
	wg     sync.WaitGroup
	// throttledUntil: no call before it (quota spent); quotaN counts the
	// quota answers in a row.
	throttledUntil time.Time
	throttleReason string
	quotaN         int
	// busyKnown: calendars whose busy time was read (checked for unlink).
	busyKnown map[string]bool
	sweeping  atomic.Bool
	limiter   *rate.Limiter
	// Push channels by id and by calendar; runCtx is Run's context, for
	// the reads notifications start.
	chanByID  map[string]*pushChannel
	chanByCal map[string]*pushChannel
	watching  atomic.Bool
	runCtx    context.Context
	// etags: the etag of each mirrored event as Google last showed it,
	// for the If-Match of its next change.
	etags *etagCache
}

// New creates a Syncer on the index store; publish sends busy commands.
func New(cfg Config, store *data.Store, publish Publisher) *Syncer {
	cfg.defaults()
	lim := rate.NewLimiter(rate.Inf, 0)
	if cfg.RequestsPerMinute > 0 {
		// A burst of a tenth of a minute's calls: smooth enough for Google,
		// quick for an on-demand sync.
		lim = rate.NewLimiter(rate.Limit(float64(cfg.RequestsPerMinute)/60), max(1, cfg.RequestsPerMinute/10))
	}
	return &Syncer{cfg: cfg, store: store, publish: publish, log: cfg.Logger.With("component", "calendarsync"),
		kick: make(chan struct{}, 1), links: map[string]*linkState{}, running: map[string]bool{}, busyKnown: map[string]bool{}, limiter: lim,
		chanByID: map[string]*pushChannel{}, chanByCal: map[string]*pushChannel{}, pruned: map[string]time.Time{},
		etags: newEtagCache(etagCacheSize)}
}

// RateLimit is the limit of Google calls per second of all calendars.
func (s *Syncer) RateLimit() float64 { return float64(s.limiter.Limit()) }

// Notify tells the Syncer that sync operations were committed. It never
// blocks (it is called on the writers' path).
func (s *Syncer) Notify() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run drains the outbox and reads busy time until ctx ends; it returns once
// its goroutines have stopped.
func (s *Syncer) Run(ctx context.Context) {
	defer s.wg.Wait()
	if s.cfg.Provider == nil {
		<-ctx.Done()
		return
	}
	s.mu.Lock()
	s.runCtx = ctx
	s.mu.Unlock()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var watchC <-chan time.Time
	if s.cfg.WebhookURL != "" {
		wt := time.NewTicker(s.cfg.WatchCheckEvery)
		defer wt.Stop()
		watchC = wt.C
		s.goWatchAll(ctx)
	}
	var busyC <-chan time.Time
	if s.cfg.BusyInterval > 0 {
		bt := time.NewTicker(s.cfg.BusyInterval)
		defer bt.Stop()
		busyC = bt.C
		s.goBusyAll(ctx)
	}
	s.goSweep(ctx, true)
	for {
		s.startDrainers(ctx)
		s.goSweep(ctx, false)
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-tick.C:
		case <-busyC:
			s.goBusyAll(ctx)
		case <-watchC:
			s.goWatchAll(ctx)
		}
	}
}

func (s *Syncer) link(cal string) *linkState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.linkLocked(cal)
}

// linkLocked is link with s.mu held.
func (s *Syncer) linkLocked(cal string) *linkState {
	l := s.links[cal]
	if l == nil {
		l = &linkState{failures: map[string]uint64{}, wake: make(chan struct{}, 1)}
		// A copy: callers may pass strings that alias reused buffers
		// (Fiber's path parameters).
		s.links[strings.Clone(cal)] = l
	}
	return l
}

// Status reports the state of calendar cal's link.
func (s *Syncer) Status(cal string, link *data.ExternalLink) data.LinkStatus {
	st := data.LinkStatus{CalendarID: link.CalendarID, SyncBusy: link.SyncBusy, Status: StatusOK}
	_ = s.store.View(func(tx *data.Tx) error {
		st.Pending = tx.SyncDepth(cal, 10000)
		d, _ := tx.DeadLetters(cal, 10000)
		st.DeadLetters = len(d)
		return nil
	})
	if s.cfg.Provider == nil {
		st.Status, st.Reason = StatusDegraded, "no credentials"
		return st
	}
	l := s.link(cal)
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.degraded {
		st.Status, st.Reason = StatusDegraded, l.reason
	} else if until := s.throttledUntil; s.cfg.Now().Before(until) {
		st.Status, st.Reason, st.ThrottledUntil = StatusThrottled, s.throttleReason, &until
	}
	st.Push = l.push
	if !l.lastSync.IsZero() {
		t := l.lastSync
		st.LastSync = &t
	}
	if len(l.failures) > 0 {
		st.Failures = map[string]uint64{}
		for k, v := range l.failures {
			st.Failures[k] = v
		}
	}
	return st
}

func (s *Syncer) succeeded(cal string) {
	l := s.link(cal)
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.degraded {
		s.log.Info("google link works again", "calendar", cal)
	}
	l.degraded, l.reason, l.lastSync = false, "", s.cfg.Now()
	s.quotaN = 0
}

// throttle makes every call wait after a quota answer: at least the
// Retry-After Google gave, else a long backoff (usage limits reset over
// minutes to a day, retrying early only spends more of them).
func (s *Syncer) throttle(cal string, err error) {
	s.mu.Lock()
	d := backoff(s.quotaN, s.cfg.QuotaPauseBase, s.cfg.QuotaPauseMax)
	s.quotaN++
	if ce, ok := callError(err); ok && ce.RetryAfter > 0 {
		d = ce.RetryAfter
	}
	until := s.cfg.Now().Add(d)
	if until.After(s.throttledUntil) {
		s.throttledUntil = until
	}
	s.throttleReason = ReasonQuotaExceeded + ": " + err.Error()
	s.mu.Unlock()
	s.log.Warn("google quota exceeded; every call waits", "calendar", cal, "for", d, "err", err)
}

// waitThrottle waits out a quota pause; false when ctx ended.
func (s *Syncer) waitThrottle(ctx context.Context) bool {
	s.mu.Lock()
	d := s.throttledUntil.Sub(s.cfg.Now())
	s.mu.Unlock()
	return d <= 0 || sleep(ctx, d, nil)
}

func (s *Syncer) failed(cal, reason string) {
	l := s.link(cal)
	s.mu.Lock()
	l.failures[reason]++
	s.mu.Unlock()
	if s.cfg.OnFailure != nil {
		s.cfg.OnFailure(reason)
	}
}

func (s *Syncer) degrade(cal, reason string, err error) {
	l := s.link(cal)
	s.mu.Lock()
	was := l.degraded
	l.degraded, l.reason = true, reason+": "+err.Error()
	s.prov = nil // re-read the credentials before the next attempt
	s.mu.Unlock()
	if !was {
		s.log.Warn("google link degraded; paused", "calendar", cal, "reason", reason, "err", err)
	}
}

// provider returns the provider's client, creating it when needed.
func (s *Syncer) provider(ctx context.Context) (Provider, error) {
	s.mu.Lock()
	p := s.prov
	s.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p, err := s.cfg.Provider(ctx)
	if err != nil {
		if !errors.Is(err, ErrCredentials) {
			err = fmt.Errorf("%w: %v", ErrCredentials, err)
		}
		return nil, err
	}
	s.mu.Lock()
	s.prov = p
	s.mu.Unlock()
	return p, nil
}

// backoff is the wait before retry number attempt (0-based): exponential
// from base, capped, with full jitter in its upper half.
func backoff(attempt int, base, max time.Duration) time.Duration {
	d := base
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + rand.N(d/2+1)
}

// sleep waits d, or until ctx ends or wake fires; false when ctx ended.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
		return false
	}
	return true
}

// Wake cuts a paused calendar's wait short (after credentials were fixed).
func (s *Syncer) Wake(cal string) {
	select {
	case s.link(cal).wake <- struct{}{}:
	default:
	}
	s.Notify()
}
