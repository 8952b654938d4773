package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nuid"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
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
}

// Refuser is implemented by backends that can answer a valid booking.create
// or hold.create from the committed index when the index already refuses it
// (queue.Node does): reply is the writer's rejection and code its rejection code,
// "" when only the writer can decide.
type Refuser interface {
	Refused(cmd *actor.Command) (reply []byte, code string, err error)
}

// Limits of the API.
const (
	DefaultBodyLimit    = 64 << 10
	DefaultHeaderLimit  = 4096
	DefaultListLimit    = 100
	MaxListLimit        = 1000
	MaxIdempotencyKey   = 255
	DefaultMaxListRange = 366 * 24 * time.Hour
)

// Server is the Fiber application.
type Server struct {
	app      *fiber.App
	backend  Backend
	cfg      Config
	log      *slog.Logger
	keys     *Keyring
	metrics  *Metrics
	limiter  *rateLimiter
	draining atomic.Bool
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
	s := &Server{backend: backend, cfg: cfg, log: cfg.Logger, keys: cfg.Keys, metrics: cfg.Metrics,
		limiter: newRateLimiter(cfg.RateLimit, cfg.RateBurst)}
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

// App exposes the Fiber app (for Listen, Test and Shutdown).
func (s *Server) App() *fiber.App { return s.app }

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
	booker := func(h fiber.Handler) []fiber.Handler {
		return []fiber.Handler{s.authorize(accessBooker), s.rateLimit, h}
	}
	admin := func(h fiber.Handler) []fiber.Handler {
		return []fiber.Handler{s.authorize(accessAdmin), s.rateLimit, h}
	}
	v1 := s.app.Group("/v1")
	v1.Put("/calendars/:calendarId", admin(s.putCalendar)...)
	v1.Get("/calendars/:calendarId", booker(s.getCalendar)...)
	v1.Post("/calendars/:calendarId/bookings", booker(s.createBooking)...)
	v1.Get("/calendars/:calendarId/bookings", booker(s.listBookings)...)
	v1.Get("/calendars/:calendarId/bookings/:bookingId", booker(s.getBooking)...)
	v1.Delete("/calendars/:calendarId/bookings/:bookingId", booker(s.byIDCommand(actor.TypeBookingCancel, "bookingId", &Error{Code: actor.CodeBookingNotFound, Message: "booking not found"}))...)
	v1.Get("/calendars/:calendarId/requests/:requestId", booker(s.getRequest)...)
	v1.Get("/calendars/:calendarId/availability", booker(s.availability)...)
	v1.Post("/calendars/:calendarId/bookings/:bookingId/reschedule", booker(s.rescheduleBooking)...)
	v1.Post("/calendars/:calendarId/holds", booker(s.createHold)...)
	v1.Post("/calendars/:calendarId/holds/:holdId/confirm", booker(s.byIDCommand(actor.TypeHoldConfirm, "holdId", errHoldNotFound))...)
	v1.Delete("/calendars/:calendarId/holds/:holdId", booker(s.byIDCommand(actor.TypeHoldRelease, "holdId", errHoldNotFound))...)
	v1.Get("/admin/digest", admin(s.digest)...)
	v1.Post("/admin/calendars/:calendarId/google/sync", admin(s.syncGoogle)...)
}

// digest returns the index digest (applied sequence per partition, a hash
// per calendar) taken in one read transaction; `bookline verify` compares
// it with a replay of the stream stopped at exactly those sequences.
func (s *Server) digest(c *fiber.Ctx) error {
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
// caught up, the index open, and not shutting down.
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
	if len(failed) > 0 {
		return &Error{Code: CodeUnavailable, Message: strings.Join(failed, "; ")}
	}
	return c.JSON(fiber.Map{"status": "ok", "checks": checks})
}

// calendarID returns the path's calendar id or an invalid_request error.
func calendarID(c *fiber.Ctx) (string, error) {
	id := c.Params("calendarId")
	if !actor.ValidCalendarID(id) {
		return "", invalid(actor.FieldError{Field: "calendarId", Message: "must match [A-Za-z0-9_-]{1,64}"})
	}
	return id, nil
}

// Request ids are scoped to the caller that sent them: two API keys that
// send the same Idempotency-Key make two requests, and an outcome is
// readable only by its caller (or an admin key). The caller is part of the
// id, so scoping costs no lookup and survives restarts:
//
//   - with API keys, caller = the key's name: "k.<name>.<h>" for an
//     Idempotency-Key, h = hex(SHA-256(key))[:32], and "r.<name>.<nuid>"
//     without one;
//   - without API keys there is one caller, "open" (every request is
//     its), whose ids keep the form they always had: "k.<h>" and
//     "r.<nuid>". Open deployments thus keep answering every key they
//     recorded before callers were scoped, with no lookup.
//
// Key names match [A-Za-z0-9_-]{1,64}, so the owner is whatever lies
// between the prefix and the next ".", and ids stay within 128 bytes.

// KeyRequestID is the request id of Idempotency-Key key sent by the API key
// named caller, or, with caller "", by anyone on an API without keys.
func KeyRequestID(caller, key string) string {
	sum := sha256.Sum256([]byte(key))
	if caller == "" {
		return "k." + hex.EncodeToString(sum[:16])
	}
	return "k." + caller + "." + hex.EncodeToString(sum[:16])
}

// requestOwner is the API key name a request id was made for, or "" for
// ids made without API keys (and by versions that did not scope keys),
// by importers and by bookline itself.
func requestOwner(id string) string {
	if len(id) < 2 || (id[:2] != "k." && id[:2] != "r.") {
		return ""
	}
	owner, _, ok := strings.Cut(id[2:], ".")
	if !ok {
		return ""
	}
	return owner
}

// callerOf is the name of c's API key ("" when the API runs without keys).
func callerOf(c *fiber.Ctx) string {
	if p := principal(c); p != nil {
		return p.Name
	}
	return ""
}

// requestID derives the command's request id: from the caller and the
// Idempotency-Key header when present (so every retry maps to the same
// record), otherwise a fresh unique id of the caller.
func requestID(c *fiber.Ctx) (string, error) {
	caller := callerOf(c)
	key := c.Get("Idempotency-Key")
	if key == "" {
		if caller == "" {
			return "r." + nuid.Next(), nil
		}
		return "r." + caller + "." + nuid.Next(), nil
	}
	if len(key) > MaxIdempotencyKey {
		return "", invalid(actor.FieldError{Field: "Idempotency-Key", Message: "must be at most 255 characters"})
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return "", invalid(actor.FieldError{Field: "Idempotency-Key", Message: "must be printable ASCII without spaces"})
		}
	}
	return KeyRequestID(caller, key), nil
}

// writeRequest reads what every write route needs: the calendar id of the
// path, the JSON body into body, and the command's request id.
func writeRequest(c *fiber.Ctx, body any) (cal, reqID string, err error) {
	if cal, err = calendarID(c); err != nil {
		return "", "", err
	}
	if err = decodeBody(c, body); err != nil {
		return "", "", err
	}
	reqID, err = requestID(c)
	return cal, reqID, err
}

// decodeBody decodes a JSON object body into v.
func decodeBody(c *fiber.Ctx, v any) error {
	body := c.Body()
	if len(bytes.TrimSpace(body)) == 0 {
		return invalid(actor.FieldError{Field: "body", Message: "a JSON object is required"})
	}
	if f, ok := v.(fastDecoder); ok {
		if f.decodeFast(body) {
			return nil
		}
		f.reset()
	}
	return decodeJSON(body, v)
}

// decodeJSON is decodeBody's encoding/json path.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return invalid(actor.FieldError{Field: "body", Message: "invalid JSON: " + err.Error()})
	}
	if len(bytes.TrimSpace(body[dec.InputOffset():])) > 0 {
		return invalid(actor.FieldError{Field: "body", Message: "trailing data after the JSON object"})
	}
	return nil
}

type calendarRequest struct {
	Name     string `json:"name"`
	Timezone string `json:"timezone"`
	// The booking rules, flat in the body (see data.Rules).
	data.Rules
	// Google links the calendar to a Google calendar (httpapi/google.go).
	Google *data.GoogleLink `json:"google"`
}

func (s *Server) putCalendar(c *fiber.Ctx) error {
	var req calendarRequest
	cal, reqID, err := writeRequest(c, &req)
	if err != nil {
		return err
	}
	cmd := &actor.Command{V: actor.SchemaVersion, Type: actor.TypeCalendarUpsert, RequestID: reqID, CalendarID: cal,
		Calendar: &actor.CalendarSpec{Name: req.Name, Timezone: req.Timezone, Rules: req.Rules, Google: req.Google}}
	return s.submit(c, cmd)
}

type bookingRequest struct {
	Start    string          `json:"start"`
	End      string          `json:"end"`
	Customer string          `json:"customer"`
	Metadata json.RawMessage `json:"metadata"`
}

// fastDecoder is a request body with a shortcut past encoding/json for the
// plain shape clients send (actor.ParseObjectFast); reset undoes a
// shortcut that gave up half way.
type fastDecoder interface {
	decodeFast(body []byte) bool
	reset()
}

// decodeFast is taken by almost every booking: encoding/json's reflection
// was about a tenth of the CPU of a booking refused from the index
// (bookline bench --scenario hot); with the shortcut, 4-15% more of them
// per second. body_test.go checks it against encoding/json.
func (r *bookingRequest) decodeFast(body []byte) bool {
	return actor.ParseObjectFast(body, []actor.FastField{
		{Name: "start", Str: &r.Start}, {Name: "end", Str: &r.End},
		{Name: "customer", Str: &r.Customer}, {Name: "metadata", Raw: &r.Metadata},
	})
}

func (r *bookingRequest) reset() { *r = bookingRequest{} }

func parseTime(field, v string) (time.Time, *actor.FieldError) {
	if v == "" {
		return time.Time{}, &actor.FieldError{Field: field, Message: "is required (RFC 3339, e.g. 2026-12-01T10:00:00Z)"}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, &actor.FieldError{Field: field, Message: "must be an RFC 3339 time with offset, e.g. 2026-12-01T10:00:00Z"}
	}
	return t, nil
}

func (s *Server) createBooking(c *fiber.Ctx) error {
	var req bookingRequest
	cal, reqID, err := writeRequest(c, &req)
	if err != nil {
		return err
	}
	spec, bad := bookingSpec(&req)
	if len(bad) > 0 {
		return invalid(bad...)
	}
	return s.submit(c, &actor.Command{V: actor.SchemaVersion, Type: actor.TypeBookingCreate, RequestID: reqID, CalendarID: cal, Booking: spec})
}

// byIDCommand handles a body-less write naming an existing booking or hold
// by the path parameter param: cancel, hold confirm, hold release. An id
// that cannot exist answers notFound without a round trip.
func (s *Server) byIDCommand(typ, param string, notFound *Error) fiber.Handler {
	return func(c *fiber.Ctx) error {
		cal, err := calendarID(c)
		if err != nil {
			return err
		}
		id := c.Params(param)
		if !actor.ValidBookingID(id) {
			return notFound
		}
		reqID, err := requestID(c)
		if err != nil {
			return err
		}
		return s.submit(c, &actor.Command{V: actor.SchemaVersion, Type: typ, RequestID: reqID, CalendarID: cal, BookingID: id})
	}
}

// submit validates cmd, sends it through the log and answers with its
// decided outcome, 202 when the answer is late, 503 when the log is down.
func (s *Server) submit(c *fiber.Ctx, cmd *actor.Command) error {
	if c.Get("Idempotency-Key") == "" {
		cmd.RecordTTLSeconds = actor.RecordTTLSeconds(s.cfg.KeylessRecordRetention)
	} else {
		cmd.RecordTTLSeconds = actor.RecordTTLSeconds(s.cfg.KeyedRecordRetention)
	}
	if errs := cmd.Validate(); len(errs) > 0 {
		return invalid(errs...)
	}
	if reply, ok := s.refused(c, cmd); ok {
		return s.writeReply(c, reply)
	}
	ctx, cancel := context.WithTimeout(actor.WithTraceID(context.Background(), requestIDOf(c)), s.cfg.ReplyTimeout)
	defer cancel()
	if reply, ok, err := s.unscopedRecord(ctx, c, cmd); err != nil {
		s.log.Warn("reading the record of an unscoped key failed", "request_id", cmd.RequestID, "trace_id", requestIDOf(c), "err", err)
		return &Error{Code: CodeUnavailable, Message: "bookings cannot be taken right now, retry later"}
	} else if ok {
		return s.writeReply(c, reply)
	}
	reply, err := s.backend.Submit(ctx, cmd, cmd.Fingerprint())
	switch {
	case errors.Is(err, actor.ErrPending):
		c.Location("/v1/calendars/" + cmd.CalendarID + "/requests/" + cmd.RequestID)
		return c.Status(http.StatusAccepted).JSON(fiber.Map{"status": "pending", "request_id": cmd.RequestID})
	case errors.Is(err, actor.ErrUnavailable):
		s.log.Warn("command not stored", "request_id", cmd.RequestID, "trace_id", requestIDOf(c), "err", err)
		return &Error{Code: CodeUnavailable, Message: "bookings cannot be taken right now, retry later"}
	case err != nil:
		return err
	}
	return s.writeReply(c, reply)
}

// Answerer is implemented by backends that can answer a command from the
// record of another request id when that record was made for the same
// request (same fingerprint), after bringing the index up to the calendar's
// last logged command (queue.Node).
type Answerer interface {
	RecordedFor(ctx context.Context, cmd *actor.Command, reqID, fingerprint string) (reply []byte, ok bool, err error)
}

// unscopedRecord answers a keyed request from the record its key got before
// keys were scoped to callers: under "k.<h>", made by a version that did
// not scope keys or while the API ran without keys. Only the same request
// (same fingerprint) is answered from it, so the record tells the caller
// nothing it did not send; it exists so that a retry across the upgrade
// (or a rolling upgrade of a cluster) gets its first answer instead of a
// second booking. Any other request under the key goes to the log under
// the caller's own id.
func (s *Server) unscopedRecord(ctx context.Context, c *fiber.Ctx, cmd *actor.Command) ([]byte, bool, error) {
	key := c.Get("Idempotency-Key")
	if key == "" || s.keys.Open() {
		return nil, false, nil // without keys the id is already "k.<h>"
	}
	a, ok := s.backend.(Answerer)
	if !ok {
		return nil, false, nil
	}
	return a.RecordedFor(ctx, cmd, KeyRequestID("", key), cmd.Fingerprint())
}

// refused answers a booking or hold without an Idempotency-Key from the
// committed index when the index already refuses it: a slot that is taken, a
// rule, a missing calendar. Nothing is logged for it. That is safe because the
// answer is true of the state at the moment it was read, the request changes
// nothing, and nobody can ask about it again: its request id was made up
// here and is never shown. A request with a key always goes through the log,
// so that every retry gets the one recorded answer. Only a refusal is
// answered here, never an acceptance, so this cannot double-book. When the
// index cannot tell, or reading it fails, the request goes to the log.
func (s *Server) refused(c *fiber.Ctx, cmd *actor.Command) ([]byte, bool) {
	if s.cfg.LogEveryBooking || (cmd.Type != actor.TypeBookingCreate && cmd.Type != actor.TypeHoldCreate) || c.Get("Idempotency-Key") != "" {
		return nil, false
	}
	rf, ok := s.backend.(Refuser)
	if !ok {
		return nil, false
	}
	reply, code, err := rf.Refused(cmd)
	if err != nil {
		s.log.Warn("reading the index before logging a booking failed; logging it", "trace_id", requestIDOf(c), "err", err)
		return nil, false
	}
	if code == "" {
		return nil, false
	}
	s.metrics.refused.WithLabelValues(cmd.Type, code).Inc()
	return reply, true
}

// writeReply answers with a decided outcome. The status and body depend only
// on the reply, so every retry of a request gets the same answer.
func (s *Server) writeReply(c *fiber.Ctx, raw []byte) error {
	status, code, body, err := replyAnswer(raw)
	if err != nil {
		return err
	}
	return sendJSON(c, status, code, body)
}

// replyAnswer is the HTTP answer to a writer's reply: its status, the error
// code of a rejection ("" when accepted) and the body. The calendar or
// booking of an accepted reply is sent as the writer encoded it: decoded
// only as far as the status needs, not re-encoded. The common cases are
// found by a scan: an accepted booking, and a rejection without details (a
// conflict, mostly), whose code, message and conflict are encoded as the
// error object encodes them.
func replyAnswer(raw []byte) (status int, code string, body []byte, err error) {
	if typ, booking, ok := actor.AcceptedBooking(raw); ok {
		return createdStatus(typ), "", booking, nil
	}
	if code, members, ok := actor.RejectedError(raw); ok {
		if status, known := statusOf[code]; known {
			body := make([]byte, 0, len(members)+len(`{"error":{}}`))
			return status, code, append(append(append(body, `{"error":{`...), members...), "}}"...), nil
		}
	}
	var r struct {
		Type     string             `json:"type"`
		Outcome  string             `json:"outcome"`
		Code     string             `json:"code"`
		Message  string             `json:"message"`
		Details  []actor.FieldError `json:"details"`
		Created  bool               `json:"created"`
		Calendar json.RawMessage    `json:"calendar"`
		Booking  json.RawMessage    `json:"booking"`
		Conflict *data.Interval     `json:"conflict"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return 0, "", nil, err
	}
	if r.Outcome == actor.OutcomeRejected {
		e := &Error{Code: r.Code, Message: r.Message, Details: r.Details, Conflict: r.Conflict}
		body, err := json.Marshal(errorBody{e})
		return e.Status(), e.Code, body, err
	}
	switch {
	case len(r.Calendar) > 0:
		if r.Created {
			return http.StatusCreated, "", r.Calendar, nil
		}
		return http.StatusOK, "", r.Calendar, nil
	case len(r.Booking) > 0:
		return createdStatus(r.Type), "", r.Booking, nil
	}
	return 0, "", nil, errors.New("httpapi: accepted reply without a body")
}

// errNotYourRequest answers a booker that asks for the outcome of a request
// id another API key made (or one made without keys, by an importer or by
// bookline itself).
var errNotYourRequest = &Error{Code: CodeForbidden, Message: "only the API key that sent this request, or an admin key, may read its outcome"}

func (s *Server) getRequest(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	reqID := c.Params("requestId")
	if !actor.ValidRequestID(reqID) {
		return invalid(actor.FieldError{Field: "requestId", Message: "must match [A-Za-z0-9._:-]{1,128}"})
	}
	// Decided from the id alone, before anything is looked up, so the
	// answer says nothing about whether the request exists.
	if p := principal(c); p != nil && p.Role != RoleAdmin && requestOwner(reqID) != p.Name {
		return errNotYourRequest
	}
	if err := s.syncRead(c, cal); err != nil {
		return err
	}
	reply, ok, err := s.backend.Lookup(cal, reqID)
	if err != nil {
		return err
	}
	if !ok {
		c.Location("/v1/calendars/" + cal + "/requests/" + reqID)
		c.Set(fiber.HeaderRetryAfter, "1")
		return c.Status(http.StatusAccepted).JSON(fiber.Map{"status": "pending", "request_id": reqID})
	}
	return s.writeReply(c, reply)
}

func (s *Server) getCalendar(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	if err := s.syncRead(c, cal); err != nil {
		return err
	}
	var out data.Calendar
	err = s.backend.View(func(tx *data.Tx) error {
		out, err = tx.Calendar(cal)
		return err
	})
	if errors.Is(err, data.ErrNotFound) {
		return &Error{Code: actor.CodeCalendarNotFound, Message: "calendar not found"}
	} else if err != nil {
		return err
	}
	return s.writeCalendar(c, out)
}

func (s *Server) getBooking(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	id := c.Params("bookingId")
	notFound := &Error{Code: actor.CodeBookingNotFound, Message: "booking not found"}
	if !actor.ValidBookingID(id) {
		return notFound
	}
	if err := s.syncRead(c, cal); err != nil {
		return err
	}
	var out data.Booking
	err = s.backend.View(func(tx *data.Tx) error {
		out, err = tx.Booking(cal, id)
		return err
	})
	if errors.Is(err, data.ErrNotFound) {
		return notFound
	} else if err != nil {
		return err
	}
	return c.JSON(out)
}

type listResponse struct {
	Bookings   []data.Booking `json:"bookings"`
	NextCursor *string        `json:"next_cursor"`
}

var (
	listMin = time.Date(actor.MinYear, 1, 1, 0, 0, 0, 0, time.UTC)
	listMax = time.Date(actor.MaxYear+1, 1, 1, 0, 0, 0, 0, time.UTC)
)

func (s *Server) listBookings(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	from, to, limit := listMin, listMax, DefaultListLimit
	var bad []actor.FieldError
	if v := c.Query("from"); v != "" {
		if t, fe := parseTime("from", v); fe != nil {
			bad = append(bad, *fe)
		} else {
			from = t
		}
	}
	if v := c.Query("to"); v != "" {
		if t, fe := parseTime("to", v); fe != nil {
			bad = append(bad, *fe)
		} else {
			to = t
		}
	}
	if len(bad) == 0 && !to.After(from) {
		bad = append(bad, actor.FieldError{Field: "to", Message: "must be after from"})
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > s.cfg.MaxListLimit {
			bad = append(bad, actor.FieldError{Field: "limit", Message: fmt.Sprintf("must be an integer from 1 to %d", s.cfg.MaxListLimit)})
		}
		limit = n
	}
	var after data.Cursor
	if v := c.Query("cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(b) < 9 {
			bad = append(bad, actor.FieldError{Field: "cursor", Message: "is not a cursor returned by this API"})
		}
		after = b
	}
	if len(bad) > 0 {
		return invalid(bad...)
	}
	// The range bound applies to an explicit range: with a bound omitted the
	// list is open-ended, and the page size bounds the work instead.
	if s.cfg.MaxListRange > 0 && c.Query("from") != "" && c.Query("to") != "" && to.Sub(from) > s.cfg.MaxListRange {
		return &Error{Code: CodeRangeTooLarge, Message: fmt.Sprintf("from and to may be at most %s apart", fmtRange(s.cfg.MaxListRange)),
			Details: []actor.FieldError{{Field: "to", Message: fmt.Sprintf("must be at most %s after from", fmtRange(s.cfg.MaxListRange))}}}
	}
	if err := s.syncRead(c, cal); err != nil {
		return err
	}
	var resp listResponse
	err = s.backend.View(func(tx *data.Tx) error {
		if _, err := tx.Calendar(cal); err != nil {
			return err
		}
		bks, next, err := tx.ListBookings(cal, from, to, limit, after)
		resp.Bookings = bks
		if next != nil {
			cur := base64.RawURLEncoding.EncodeToString(next)
			resp.NextCursor = &cur
		}
		return err
	})
	if errors.Is(err, data.ErrNotFound) {
		return &Error{Code: actor.CodeCalendarNotFound, Message: "calendar not found"}
	} else if err != nil {
		return err
	}
	if resp.Bookings == nil {
		resp.Bookings = []data.Booking{}
	}
	return c.JSON(resp)
}
