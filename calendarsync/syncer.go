package calendarsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/api/calendar/v3"
	"google.golang.org/api/googleapi"

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
	// Service creates the Google client; nil means no credentials are
	// configured: linked calendars are reported degraded and Google is
	// never called.
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
	svc    *calendar.Service
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
	if s.cfg.Service == nil {
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
func (s *Syncer) Status(cal string, link *data.GoogleLink) data.GoogleStatus {
	st := data.GoogleStatus{CalendarID: link.CalendarID, SyncBusy: link.SyncBusy, Status: StatusOK}
	_ = s.store.View(func(tx *data.Tx) error {
		st.Pending = tx.SyncDepth(cal, 10000)
		d, _ := tx.DeadLetters(cal, 10000)
		st.DeadLetters = len(d)
		return nil
	})
	if s.cfg.Service == nil {
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
	var ge *googleapi.Error
	if errors.As(err, &ge) && ge.Header != nil {
		if secs, perr := strconv.Atoi(ge.Header.Get("Retry-After")); perr == nil && secs > 0 {
			d = time.Duration(secs) * time.Second
		}
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
	s.svc = nil // re-read the credentials before the next attempt
	s.mu.Unlock()
	if !was {
		s.log.Warn("google link degraded; paused", "calendar", cal, "reason", reason, "err", err)
	}
}

// service returns the client, creating it when needed.
func (s *Syncer) service(ctx context.Context) (*calendar.Service, error) {
	s.mu.Lock()
	svc := s.svc
	s.mu.Unlock()
	if svc != nil {
		return svc, nil
	}
	svc, err := s.cfg.Service(ctx)
	if err != nil {
		if !errors.Is(err, ErrCredentials) {
			err = fmt.Errorf("%w: %v", ErrCredentials, err)
		}
		return nil, err
	}
	s.mu.Lock()
	s.svc = svc
	s.mu.Unlock()
	return svc, nil
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

func (s *Syncer) startDrainers(ctx context.Context) {
	var cals []string
	if err := s.store.View(func(tx *data.Tx) error { cals = tx.SyncCalendars(); return nil }); err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cal := range cals {
		if s.running[cal] {
			continue
		}
		if !s.cfg.owns(cal) {
			if s.cfg.Progress != nil && s.cfg.Now().Sub(s.pruned[cal]) >= pruneEvery {
				s.pruned[cal] = s.cfg.Now()
				s.running[cal] = true
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					if _, err := s.dropConfirmed(ctx, cal); err != nil && ctx.Err() == nil {
						s.log.Debug("dropping mirror operations confirmed elsewhere", "calendar", cal, "err", err)
					}
					s.mu.Lock()
					delete(s.running, cal)
					s.mu.Unlock()
				}()
			}
			continue
		}
		s.running[cal] = true
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.drain(ctx, cal)
			s.mu.Lock()
			delete(s.running, cal)
			s.mu.Unlock()
		}()
	}
}

// pruneEvery is how often the operations of a calendar another instance
// mirrors are dropped up to what Google confirmed.
const pruneEvery = 5 * time.Second

// dropConfirmed deletes calendar cal's queued operations up to the sequence
// Google confirmed (Progress), which an earlier owner may have mirrored.
func (s *Syncer) dropConfirmed(ctx context.Context, cal string) (uint64, error) {
	if s.cfg.Progress == nil {
		return 0, nil
	}
	done, err := s.cfg.Progress.MirrorConfirmed(ctx, cal)
	if err != nil || done == 0 {
		return done, err
	}
	for {
		var seqs []uint64
		if err := s.store.View(func(tx *data.Tx) error {
			entries, err := tx.PendingSync(cal, 256)
			for _, e := range entries {
				if e.Seq <= done {
					seqs = append(seqs, e.Seq)
				}
			}
			return err
		}); err != nil || len(seqs) == 0 {
			return done, err
		}
		if err := s.store.Commit(func(tx *data.Tx) error { return tx.DeleteSync(cal, seqs) }); err != nil {
			return done, err
		}
	}
}

// drain mirrors calendar cal's queued operations in order until none is
// left, ctx ends or this instance no longer owns the calendar. It starts
// after what Google confirmed for whichever instance mirrored before.
func (s *Syncer) drain(ctx context.Context, cal string) {
	if _, err := s.dropConfirmed(ctx, cal); err != nil {
		s.log.Warn("reading how far google confirmed the calendar; retried", "calendar", cal, "err", err)
		return
	}
	for ctx.Err() == nil && s.cfg.owns(cal) {
		var entries []data.SyncEntry
		var link *data.GoogleLink
		err := s.store.View(func(tx *data.Tx) (err error) {
			if c, err := tx.Calendar(cal); err == nil {
				link = c.Google
			}
			entries, err = tx.PendingSync(cal, s.cfg.Batch)
			return err
		})
		if err != nil {
			s.log.Error("reading the google sync outbox", "calendar", cal, "err", err)
			return
		}
		if len(entries) == 0 {
			return
		}
		var done []data.SyncEntry
		// flush deletes what is done from the outbox and tells the other
		// instances how far Google has the calendar's operations.
		flush := func() bool {
			if len(done) == 0 {
				return true
			}
			last := done[len(done)-1].Seq
			err := s.store.Commit(func(tx *data.Tx) error { return tx.DeleteSyncEntries(done) })
			done = nil
			if err != nil {
				return false
			}
			if s.cfg.Progress != nil {
				if err := s.cfg.Progress.ConfirmMirror(ctx, cal, last); err != nil && ctx.Err() == nil {
					// A lagging record makes the next owner repeat
					// operations, which are idempotent, in order.
					s.log.Warn("recording mirror progress", "calendar", cal, "err", err)
				}
			}
			return true
		}
		for _, e := range entries {
			if !s.cfg.owns(cal) {
				break
			}
			if link == nil || link.CalendarID != e.GoogleCalendar {
				// Unlinked, or linked to another Google calendar since:
				// the operation is cancelled, the old calendar is left as
				// it is.
				s.log.Info("google link changed; queued mirror operation cancelled", "calendar", cal, "booking", e.Booking.ID, "seq", e.Seq, "google_calendar", e.GoogleCalendar)
				done = append(done, e)
				continue
			}
			ok, dead := s.mirrorOne(ctx, e, link)
			if !ok {
				// ctx ended, or this instance may not call for the
				// calendar now (Fence): what Google has is recorded, the
				// rest waits for the next drainer.
				flush()
				return
			}
			if dead != "" {
				if !flush() {
					return
				}
				d := data.DeadLetter{Entry: e, Reason: dead, Attempts: s.cfg.EntryAttempts, At: s.cfg.Now().UTC()}
				if err := s.store.Commit(func(tx *data.Tx) error { return tx.PutDeadLetter(d) }); err != nil {
					return
				}
				s.log.Error("google refused a mirror operation again and again; set aside as a dead letter", "calendar", cal, "booking", e.Booking.ID, "seq", e.Seq, "reason", dead)
				continue
			}
			done = append(done, e)
			if len(done) == 16 && !flush() {
				return
			}
		}
		if !flush() {
			return
		}
	}
}

// entryError marks a failure of one operation that says nothing about the
// link (the calendar's other operations may well succeed).
type entryError struct{ err error }

func (e *entryError) Error() string { return e.err.Error() }
func (e *entryError) Unwrap() error { return e.err }

// mirrorOne applies one operation, retrying until it is done (true, ""),
// given up as a dead letter (true, reason) or ctx ends (false).
func (s *Syncer) mirrorOne(ctx context.Context, e data.SyncEntry, link *data.GoogleLink) (bool, string) {
	retry, pause, attempts := 0, 0, 0
	l := s.link(e.Calendar)
	for try := 0; ctx.Err() == nil; try++ {
		if !s.waitThrottle(ctx) {
			return false, ""
		}
		if try > 0 {
			// The link may have changed while this operation waited.
			link = nil
			_ = s.store.View(func(tx *data.Tx) error {
				if c, err := tx.Calendar(e.Calendar); err == nil {
					link = c.Google
				}
				return nil
			})
			if link == nil || link.CalendarID != e.GoogleCalendar {
				s.log.Info("google link changed; queued mirror operation cancelled", "calendar", e.Calendar, "booking", e.Booking.ID, "seq", e.Seq)
				return true, ""
			}
		}
		err := s.applyOnce(ctx, e, link)
		if err == nil {
			s.succeeded(e.Calendar)
			return true, ""
		}
		if ctx.Err() != nil {
			return false, ""
		}
		var fe *fenceError
		if errors.As(err, &fe) {
			s.log.Debug("not mirroring: this instance does not hold the calendar's ownership epoch now", "calendar", e.Calendar, "err", fe.err)
			return false, ""
		}
		act, reason := classify(err)
		if act == actNotFound {
			act = actDegrade
		}
		var ee *entryError
		if errors.As(err, &ee) {
			act = actDrop
		}
		s.failed(e.Calendar, reason)
		switch act {
		case actDrop:
			attempts++
			if attempts >= s.cfg.EntryAttempts {
				return true, reason + ": " + err.Error()
			}
			s.log.Warn("google refused a mirror operation; retrying it", "calendar", e.Calendar, "booking", e.Booking.ID, "seq", e.Seq, "attempt", attempts, "err", err)
			if !sleep(ctx, backoff(attempts, s.cfg.RetryBase, s.cfg.RetryMax), nil) {
				return false, ""
			}
		case actThrottle:
			s.throttle(e.Calendar, err)
		case actDegrade:
			s.degrade(e.Calendar, reason, err)
			d := backoff(pause, s.cfg.PauseBase, s.cfg.PauseMax)
			pause++
			s.mu.Lock()
			l.pausedUntil = s.cfg.Now().Add(d)
			s.mu.Unlock()
			if !sleep(ctx, d, l.wake) {
				return false, ""
			}
		default:
			// Transient failures, and 412s that outlasted patch's own
			// re-reads (an event changing under it): never the entry's
			// fault, so never a dead letter.
			s.log.Debug("google call failed; retrying", "calendar", e.Calendar, "reason", reason, "err", err)
			if !sleep(ctx, backoff(retry, s.cfg.RetryBase, s.cfg.RetryMax), nil) {
				return false, ""
			}
			retry++
		}
	}
	return false, ""
}

// Private extended properties of mirrored events.
const (
	PropBookingID  = "bookline_booking_id"
	PropCalendarID = "bookline_calendar_id"
)

// Defaults of a link's event title and visibility: a mirrored event tells
// whoever can see the calendar that the time is booked, and no more.
const (
	DefaultEventTitle = "Booked"
	DefaultVisibility = "private"
)

// EventTitle fills a link's title template: {customer}, {calendar} (the
// bookline calendar id) and {booking} (the booking id) are replaced.
func EventTitle(tmpl string, bk *data.Booking) string {
	if tmpl == "" {
		tmpl = DefaultEventTitle
	}
	return strings.NewReplacer("{customer}", bk.Customer, "{calendar}", bk.CalendarID, "{booking}", bk.ID).Replace(tmpl)
}

// EventFor is the Google event mirroring booking bk on link (its id is the
// booking id: 26 characters of base32hex, a valid client-chosen event id).
// Title and visibility are the link's (default: "Booked", private); the
// description names the booking only.
func EventFor(bk *data.Booking, link *data.GoogleLink) *calendar.Event {
	vis := DefaultVisibility
	var tmpl string
	if link != nil {
		tmpl = link.EventTitle
		if link.Visibility != "" {
			vis = link.Visibility
		}
	}
	return &calendar.Event{
		Id:           bk.ID,
		Summary:      EventTitle(tmpl, bk),
		Description:  "bookline booking " + bk.ID + " on calendar " + bk.CalendarID,
		Start:        &calendar.EventDateTime{DateTime: bk.Start.UTC().Format(time.RFC3339), TimeZone: "UTC"},
		End:          &calendar.EventDateTime{DateTime: bk.End.UTC().Format(time.RFC3339), TimeZone: "UTC"},
		Status:       "confirmed",
		Transparency: "opaque",
		Visibility:   vis,
		ExtendedProperties: &calendar.EventExtendedProperties{Private: map[string]string{
			PropBookingID: bk.ID, PropCalendarID: bk.CalendarID,
		}},
	}
}

// callCtx bounds one Google call, after the shared rate limiter let it
// through.
func (s *Syncer) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	_ = s.limiter.Wait(ctx) // an ended ctx fails the call itself
	return context.WithTimeout(ctx, s.cfg.CallTimeout)
}

// errInconsistent: Google said duplicate but has no such event (retried).
var errInconsistent = errors.New("calendarsync: insert answered duplicate but the event is not there")

func (s *Syncer) applyOnce(ctx context.Context, e data.SyncEntry, link *data.GoogleLink) error {
	svc, err := s.service(ctx)
	if err != nil {
		return err
	}
	ev := EventFor(&e.Booking, link)
	g := e.GoogleCalendar
	switch e.Op {
	case data.SyncDelete:
		// Unconditional: a delete is a booking's last operation, and a
		// change of ours arriving after it carries an older etag, so
		// Google refuses it (412). The etag is of no further use.
		s.etags.forget(eventKey{g, ev.Id})
		c, cancel, err := s.mirrorCtx(ctx, e.Calendar)
		if err != nil {
			return err
		}
		err = svc.Events.Delete(g, ev.Id).Context(c).Do()
		cancel()
		if act, _ := classify(err); err != nil && act == actGone {
			return nil // already deleted
		} else if err != nil && act == actNotFound {
			// Google answers 404 for a missing event and for a calendar
			// that is gone or no longer shared: only the first is done.
			return s.calendarReadable(ctx, svc, e.Calendar, g)
		}
		return err
	case data.SyncUpdate:
		// No status in this patch, a second guard besides its If-Match: a
		// patch Google applies late must never bring a deleted event back.
		moved := *ev
		moved.Status = ""
		err := s.patch(ctx, svc, e.Calendar, g, &moved)
		if act, _ := classify(err); err != nil && (act == actNotFound || act == actGone) {
			return s.insert(ctx, svc, e.Calendar, g, ev) // never mirrored (linked later)
		}
		return err
	default:
		return s.insert(ctx, svc, e.Calendar, g, ev)
	}
}

// preconditionRounds is how often patch reads the event and tries again
// after 412s in a row before it leaves the operation to mirrorOne's
// backoff: a few rounds absorb a late write or a hand edit at once, and
// an event that keeps changing under it cannot make it spin.
const preconditionRounds = 3

// getEvent reads the event of bookline calendar cal's mirror and remembers
// its etag. Fenced like a change: what a read returns decides the next
// write.
func (s *Syncer) getEvent(ctx context.Context, svc *calendar.Service, cal, g, id string) (*calendar.Event, error) {
	c, cancel, err := s.mirrorCtx(ctx, cal)
	if err != nil {
		return nil, err
	}
	got, err := svc.Events.Get(g, id).Context(c).Do()
	cancel()
	if err != nil {
		s.etags.forget(eventKey{g, id})
		return nil, err
	}
	s.etags.put(eventKey{g, id}, got.Etag)
	return got, nil
}

// patch brings the event to ev by a patch conditional on the etag the
// mirror last saw (If-Match), reading the event first when that etag is
// not known; an event that already is ev is left alone. A write of ours
// that Google applies late (its call timed out here) carries an older
// etag than any later change, so Google refuses it instead of letting it
// overwrite that change. 412 means the event changed since its etag was
// read: it is read and patched again. cal is the bookline calendar (for
// the failure counts).
//
// Google answers 403 to a change of an event its owner deleted in the UI;
// that 403 is about the event, not the link.
func (s *Syncer) patch(ctx context.Context, svc *calendar.Service, cal, g string, ev *calendar.Event) error {
	key := eventKey{g, ev.Id}
	etag, known := s.etags.get(key)
	for round := 1; ; round++ {
		if !known {
			got, err := s.getEvent(ctx, svc, cal, g, ev.Id)
			if err != nil {
				return err
			}
			if got.Status != "cancelled" && sameEvent(got, ev) {
				return nil
			}
			etag = got.Etag
		}
		c, cancel, err := s.mirrorCtx(ctx, cal)
		if err != nil {
			return err
		}
		call := svc.Events.Patch(g, ev.Id, ev).Context(c)
		call.Header().Set("If-Match", etag)
		got, err := call.Do()
		cancel()
		if err == nil {
			s.etags.put(key, got.Etag)
			return nil
		}
		// Applied or not, late or never (a timeout, a 5xx), or changed by
		// someone else (412): only a new read tells the etag.
		s.etags.forget(key)
		act, reason := classify(err)
		if act == actPrecondition && round < preconditionRounds && ctx.Err() == nil {
			s.failed(cal, reason)
			known = false
			continue
		}
		if act != actDegrade || reason != ReasonForbidden {
			return err
		}
		got, gerr := s.getEvent(ctx, svc, cal, g, ev.Id)
		if gerr == nil && got.Status == "cancelled" {
			return &entryError{fmt.Errorf("the event was deleted in Google and cannot be changed: %w", err)}
		}
		return err
	}
}

// calendarReadable tells a missing event from a missing calendar: nil when
// the calendar answers a one-event list.
func (s *Syncer) calendarReadable(ctx context.Context, svc *calendar.Service, cal, g string) error {
	c, cancel, err := s.mirrorCtx(ctx, cal)
	if err != nil {
		return err
	}
	defer cancel()
	_, err = svc.Events.List(g).MaxResults(1).Context(c).Do()
	return err
}

// insert creates the event (Google has no conditional insert; the
// client-chosen id makes every insert after the first answer 409); a 409
// means an earlier attempt created it: if that event was deleted since
// (status cancelled) or differs, it is restored by a conditional patch.
func (s *Syncer) insert(ctx context.Context, svc *calendar.Service, cal, g string, ev *calendar.Event) error {
	key := eventKey{g, ev.Id}
	c, cancel, err := s.mirrorCtx(ctx, cal)
	if err != nil {
		return err
	}
	created, err := svc.Events.Insert(g, ev).Context(c).Do()
	cancel()
	if err == nil {
		s.etags.put(key, created.Etag)
		return nil
	}
	s.etags.forget(key)
	if act, _ := classify(err); act != actConflict {
		return err
	}
	got, err := s.getEvent(ctx, svc, cal, g, ev.Id)
	if act, _ := classify(err); err != nil && (act == actNotFound || act == actGone) {
		return &entryError{errInconsistent}
	} else if err != nil {
		return err
	}
	if got.Status == "cancelled" || !sameEvent(got, ev) {
		return s.patch(ctx, svc, cal, g, ev)
	}
	return nil
}

func sameEvent(a, b *calendar.Event) bool {
	at := func(d *calendar.EventDateTime) time.Time {
		if d == nil {
			return time.Time{}
		}
		t, _ := time.Parse(time.RFC3339, d.DateTime)
		return t
	}
	prop := func(e *calendar.Event) string {
		if e.ExtendedProperties == nil {
			return ""
		}
		return e.ExtendedProperties.Private[PropBookingID]
	}
	// Google leaves out fields at their defaults.
	orDef := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	return at(a.Start).Equal(at(b.Start)) && at(a.End).Equal(at(b.End)) && prop(a) == prop(b) && a.Summary == b.Summary &&
		a.Description == b.Description && orDef(a.Visibility, "default") == orDef(b.Visibility, "default") &&
		orDef(a.Transparency, "opaque") == orDef(b.Transparency, "opaque")
}
