package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/secretkey"
)

// Backend is what the HTTP API needs from the rest of bookline: a way to
// submit commands to the log and wait for their answer, and read access to
// the committed index. It never writes the index.
type Backend interface {
	Submit(ctx context.Context, cmd *actor.Command, fingerprint string) ([]byte, error)
	Lookup(calID, reqID string) ([]byte, bool, error)
	View(fn func(*data.Tx) error) error
	Ready() error
}

// Config configures the HTTP API.
type Config struct {
	// ReplyTimeout is how long a write waits for the writer's answer before
	// answering 202 with a Location to poll.
	ReplyTimeout time.Duration
	// BodyLimit is the largest accepted request body (default 64 KiB).
	BodyLimit int
	Logger    *slog.Logger
	// WithTraceID, when set, returns a context that carries a write's
	// request id (X-Request-Id) to the backend, which sends it with the
	// command (queue.WithTraceID); nil sends none.
	WithTraceID func(ctx context.Context, id string) context.Context

	// Keys are the API keys; nil or empty runs the API open (no
	// authentication): the caller decides whether that is allowed.
	Keys *Keyring
	// Metrics receives HTTP metrics and serves /metrics; nil creates a
	// registry with HTTP metrics only.
	Metrics *Metrics
	// HeaderLimit is the largest request line plus headers (default 4 KiB;
	// larger answers 431 headers_too_large).
	HeaderLimit int
	// ReadTimeout, WriteTimeout and IdleTimeout bound reading a request,
	// writing its answer and an idle keep-alive connection (defaults 30s,
	// 30s, 2m).
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxListRange bounds to - from of a booking list when both are given
	// (default 366 days; negative = no bound).
	MaxListRange time.Duration
	// MaxListLimit is the largest page size of a list (default 1000).
	MaxListLimit int
	// RateLimit is the sustained requests per second allowed per API key
	// (callers without a key, on an open loopback API, are not limited);
	// 0 = no limit. RateBurst is the
	// bucket size (default: RateLimit rounded up).
	RateLimit float64
	RateBurst int
	// PageRateLimit and PageRateBurst are the same per client IP address
	// for requests with a publishable key (which anyone can copy from a
	// page, so a per-key bucket would let one client starve every
	// visitor); 0 = no limit.
	PageRateLimit float64
	PageRateBurst int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is
	// believed: the client of a request whose peer is one of them is the
	// right-most address of that header that is not (see clientIP). Empty:
	// the header is ignored and the peer is the client.
	TrustedProxies []netip.Prefix
	// AvailabilitySweeps is how many availability queries are computed at
	// once; more wait (up to ReplyTimeout, then 503 unavailable). Default:
	// half the CPUs (GOMAXPROCS), at least 1, so that reads never take
	// every core from the writers.
	AvailabilitySweeps int
	// MaxWebhooks bounds the webhook endpoints (default 100): their list
	// is one page, and each is a consumer of the event stream.
	MaxWebhooks int
	// LogEveryBooking sends every booking and hold through the log, also
	// one without an Idempotency-Key that the committed index already
	// refuses (see Refuser); by default such a request is answered from
	// the index.
	LogEveryBooking bool
	// KeylessRecordRetention is how long, in log time, the request record
	// of a write without an Idempotency-Key is kept: long enough for its
	// 202 Location to be read, as nobody else can name it. 0 keeps it
	// forever. KeyedRecordRetention is the same for writes with a key (0,
	// forever, is what makes every retry of a key get its first answer).
	// Both travel with the command (record_ttl_seconds).
	KeylessRecordRetention, KeyedRecordRetention time.Duration
	// Secrets signs the secrets of holds (holdsecret.go); every instance
	// that shares the stream must have the same key. nil: a key of this
	// process only.
	Secrets *secretkey.Key
	// Ports are the optional features (ports.go); a nil one is off.
	Ports Ports
}

// Refuser is the port that answers a valid booking.create or hold.create
// from the committed index when the index already refuses it (queue.Node
// implements it): reply is the writer's rejection and code its rejection code,
// "" when only the writer can decide. ctx bounds what it may wait for (in
// cluster mode, the index catching up to the calendar's last command).
type Refuser interface {
	Refused(ctx context.Context, cmd *actor.Command) (reply []byte, code string, err error)
}

// DurabilityReporter is the port that knows whether answered commands may
// be lost to a power cut of the NATS servers (queue.Node implements it):
// lazy is true when a server acknowledges before it
// syncs, or was not checked; detail says which and why. /readyz shows
// detail as its nats_durability check without failing on it, and
// bookline_nats_lazy_sync is lazy.
type DurabilityReporter interface {
	NATSDurability() (lazy bool, detail string)
}

// Limits of the API.
const (
	DefaultBodyLimit    = 64 << 10
	DefaultHeaderLimit  = 4096
	DefaultListLimit    = 100
	MaxListLimit        = 1000
	MaxIdempotencyKey   = 255
	DefaultMaxListRange = 366 * 24 * time.Hour
	DefaultMaxWebhooks  = 100
)

// Server is the Fiber application.
type Server struct {
	app     *fiber.App
	backend Backend
	cfg     Config
	log     *slog.Logger
	keys    *Keyring
	metrics *Metrics
	limiter *rateLimiter
	// pageLimiter limits publishable keys per client address.
	pageLimiter *rateLimiter
	draining    atomic.Bool
	// secrets signs hold secrets (Config.Secrets).
	secrets *secretkey.Key
	// sweeps holds a token per availability query being computed.
	sweeps chan struct{}
	// digesting is set while a digest runs: it reads the whole index, so
	// one runs at a time.
	digesting atomic.Bool
	// commits gathers collective commits per partition (nil: one
	// command each; commitbatch.go).
	commits *commitBatcher
}

// New builds the API on backend.
func New(backend Backend, cfg Config) *Server {
	if cfg.ReplyTimeout <= 0 {
		cfg.ReplyTimeout = 5 * time.Second
	}
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = DefaultBodyLimit
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HeaderLimit <= 0 {
		cfg.HeaderLimit = DefaultHeaderLimit
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.MaxListRange == 0 {
		cfg.MaxListRange = DefaultMaxListRange
	}
	if cfg.MaxListLimit <= 0 {
		cfg.MaxListLimit = MaxListLimit
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Secrets == nil {
		cfg.Secrets = newEphemeralKey()
	}
	if cfg.MaxWebhooks <= 0 {
		cfg.MaxWebhooks = DefaultMaxWebhooks
	}
	if cfg.AvailabilitySweeps <= 0 {
		cfg.AvailabilitySweeps = max(1, runtime.GOMAXPROCS(0)/2)
	}
	s := &Server{backend: backend, cfg: cfg, log: cfg.Logger, keys: cfg.Keys, metrics: cfg.Metrics, secrets: cfg.Secrets,
		limiter: newRateLimiter(cfg.RateLimit, cfg.RateBurst), pageLimiter: newRateLimiter(cfg.PageRateLimit, cfg.PageRateBurst),
		sweeps: make(chan struct{}, cfg.AvailabilitySweeps)}
	s.commits = newCommitBatcher(s, cfg.Ports.Partitions)
	s.app = fiber.New(fiber.Config{
		AppName:               "bookline",
		BodyLimit:             cfg.BodyLimit,
		ReadBufferSize:        cfg.HeaderLimit,
		ErrorHandler:          s.errorHandler,
		DisableStartupMessage: true,
		ReadTimeout:           cfg.ReadTimeout,
		WriteTimeout:          cfg.WriteTimeout,
		IdleTimeout:           cfg.IdleTimeout,
	})
	s.routes()
	return s
}

// App exposes the Fiber app (for Test and Shutdown).
func (s *Server) App() *fiber.App { return s.app }

// Serve answers HTTP on ln until the app shuts down. Connections close with
// a lingering close (see LingerListener), so a client still sending a body
// that was refused reads the refusal rather than a reset.
func (s *Server) Serve(ln net.Listener) error { return s.app.Listener(LingerListener(ln)) }

// SetDraining makes /healthz and /readyz answer 503 from now on (the
// process is shutting down); requests are still served until the listener
// closes.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Metrics is the registry the server reports to.
func (s *Server) Metrics() *Metrics { return s.metrics }

func (s *Server) routes() {
	s.app.Use(s.observe)
	s.app.Get("/healthz", s.healthz)
	s.app.Get("/livez", s.livez)
	s.app.Get("/readyz", s.readyz)
	s.app.Get("/metrics", s.metrics.handler())
	s.app.Get("/openapi.yaml", s.openapi)
	s.app.Use("/v1", s.cors)
	s.uiRoutes()
	booker := func(h fiber.Handler) []fiber.Handler {
		return []fiber.Handler{s.authorize(accessBooker), s.rateLimit, h}
	}
	admin := func(h fiber.Handler) []fiber.Handler {
		return []fiber.Handler{s.authorize(accessAdmin), s.rateLimit, h}
	}
	// page routes are also open to publishable keys (booking pages).
	page := func(h fiber.Handler) []fiber.Handler {
		return []fiber.Handler{s.authorize(accessPage), s.rateLimit, h}
	}
	v1 := s.app.Group("/v1")
	v1.Get("/availability", page(s.availabilityAll)...)
	v1.Post("/bookings", booker(s.createCollective)...)
	v1.Post("/holds", page(s.createCollectiveHold)...)
	v1.Get("/page", page(s.teamPage)...)
	v1.Put("/pools/:poolId", admin(s.putPool)...)
	v1.Get("/pools/:poolId", booker(s.getPool)...)
	v1.Post("/pools/:poolId/bookings", booker(s.createPoolBooking)...)
	v1.Get("/pools/:poolId/availability", page(s.poolAvailability)...)
	v1.Post("/pools/:poolId/holds", page(s.createPoolHold)...)
	v1.Get("/pools/:poolId/page", page(s.poolPage)...)
	v1.Put("/calendars/:calendarId", admin(s.putCalendar)...)
	v1.Get("/calendars/:calendarId", booker(s.getCalendar)...)
	v1.Post("/calendars/:calendarId/bookings", booker(s.createBooking)...)
	v1.Get("/calendars/:calendarId/bookings", booker(s.listBookings)...)
	v1.Get("/calendars/:calendarId/bookings/:bookingId", booker(s.getBooking)...)
	v1.Delete("/calendars/:calendarId/bookings/:bookingId", booker(s.byIDCommand(actor.TypeBookingCancel, "bookingId", &Error{Code: actor.CodeBookingNotFound, Message: "booking not found"}))...)
	v1.Get("/calendars/:calendarId/requests/:requestId", booker(s.getRequest)...)
	v1.Get("/calendars/:calendarId/availability", page(s.availability)...)
	v1.Post("/calendars/:calendarId/bookings/:bookingId/reschedule", booker(s.rescheduleBooking)...)
	v1.Post("/calendars/:calendarId/holds", page(s.createHold)...)
	v1.Post("/calendars/:calendarId/holds/:holdId/confirm", page(s.byIDCommand(actor.TypeHoldConfirm, "holdId", errHoldNotFound))...)
	v1.Delete("/calendars/:calendarId/holds/:holdId", page(s.byIDCommand(actor.TypeHoldRelease, "holdId", errHoldNotFound))...)
	v1.Get("/calendars/:calendarId/page", page(s.calendarPage)...)
	v1.Get("/admin/digest", admin(s.digest)...)
	v1.Get("/admin/cluster", admin(s.clusterStatus)...)
	v1.Post("/admin/snapshots", admin(s.takeSnapshot)...)
	v1.Post("/admin/partitions/:partition/skip", admin(s.skipPartition)...)
	v1.Get("/admin/snapshots", admin(s.listSnapshots)...)
	v1.Post("/admin/calendars/:calendarId/google/sync", admin(s.syncGoogle)...)
	s.webhookRoutes(v1, admin)
	v1.Get("/admin/calendars/:calendarId/google/dead-letters", admin(s.listDeadLetters)...)
	v1.Post("/admin/calendars/:calendarId/google/dead-letters/:letterId/retry", admin(s.deadLetterAction(true))...)
	v1.Delete("/admin/calendars/:calendarId/google/dead-letters/:letterId", admin(s.deadLetterAction(false))...)
	// Google cannot send an API key: the channel token is the check.
	v1.Post("/google/notifications", s.rateLimit, s.googleNotification)
}

// digest returns the index digest (applied sequence per partition, a hash
// per calendar) taken in one read transaction; `bookline verify` compares
// it with a replay of the stream stopped at exactly those sequences.
func (s *Server) digest(c *fiber.Ctx) error {
	if !s.digesting.CompareAndSwap(false, true) {
		c.Set(fiber.HeaderRetryAfter, "1")
		return &Error{Code: CodeRateLimited, Message: "a digest of the index is being computed already (one at a time); retry later"}
	}
	defer s.digesting.Store(false)
	var d data.Digest
	err := s.backend.View(func(tx *data.Tx) (err error) {
		d, err = tx.Digest()
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(d)
}

// healthz keeps its original meaning: 200 once NATS is connected
// and every partition has caught up, 503 otherwise (and while draining).
func (s *Server) healthz(c *fiber.Ctx) error {
	err := s.backend.Ready()
	if err == nil && s.draining.Load() {
		err = errDraining
	}
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: err.Error()}
	}
	return c.JSON(fiber.Map{"status": "ok"})
}

var errDraining = errors.New("shutting down")

// livez answers 200 while the process serves HTTP at all (liveness).
func (s *Server) livez(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"status": "alive"})
}

// readyz is the full readiness check: NATS connected, every partition
// caught up, the index open, and not shutting down; it also says whether
// answered commands survive a power cut of the NATS servers.
func (s *Server) readyz(c *fiber.Ctx) error {
	checks := fiber.Map{"nats_and_partitions": "ok", "index": "ok", "shutdown": "no"}
	var failed []string
	if err := s.backend.Ready(); err != nil {
		checks["nats_and_partitions"] = err.Error()
		failed = append(failed, err.Error())
	}
	if err := s.backend.View(func(*data.Tx) error { return nil }); err != nil {
		checks["index"] = err.Error()
		failed = append(failed, "index: "+err.Error())
	}
	if s.draining.Load() {
		checks["shutdown"] = "draining"
		failed = append(failed, errDraining.Error())
	}
	if d := s.cfg.Ports.Durability; d != nil {
		// Reported, never failed on: a start with lazy servers was
		// allowed on purpose (--allow-lazy-nats-sync), and a load
		// balancer must not take every instance out for it.
		_, checks["nats_durability"] = d.NATSDurability()
	}
	if len(failed) > 0 {
		return &Error{Code: CodeUnavailable, Message: strings.Join(failed, "; ")}
	}
	return c.JSON(fiber.Map{"status": "ok", "checks": checks})
}
