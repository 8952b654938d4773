// Command pgbaseline is a COMPARISON BASELINE, not part of bookline: a small
// server that implements bookline's HTTP booking routes on PostgreSQL, so that
// `bookline bench` (and `make bench-compare`) can measure bookline against
// the strongest common answer to "why not just use PostgreSQL?".
//
// Overlaps are prevented by an exclusion constraint,
//
//	EXCLUDE USING gist (calendar_id WITH =, tstzrange(start_time, end_time, '[)') WITH &&)
//	    WHERE (status = 'confirmed')
//
// (needs the btree_gist extension). Under heavy concurrent conflicting
// inserts the exclusion check alone deadlocks (40P01, about 1 s each at the
// default deadlock_timeout), so every booking first locks its calendar's row
// (SELECT ... FOR UPDATE on calendars), which serialises writes per calendar
// and removes the deadlocks; the constraint stays as the guarantee. Lock,
// conflict query and insert run in one PL/pgSQL function call: one round
// trip and one commit per booking, the lock held until that commit. A
// conflict already visible before the lock is answered without taking it
// (a read-only transaction, no WAL flush), which makes the hot-calendar case
// as cheap as PostgreSQL can make it; --lock-only turns that off (the plain
// lock-first variant). This is
// the strongest fair variant we know (docs/benchmarks.md says more).
//
// Routes (same paths, status codes and JSON shapes as bookline):
//
//	PUT    /v1/calendars/{id}                      201 created / 200 updated
//	GET    /v1/calendars/{id}                      200 / 404 calendar_not_found
//	POST   /v1/calendars/{id}/bookings             201 / 409 slot_taken (+conflict) / 404 / 400
//	GET    /v1/calendars/{id}/bookings             from, to, limit, cursor -> {"bookings", "next_cursor"}
//	GET    /v1/calendars/{id}/bookings/{bid}       200 / 404 booking_not_found
//	DELETE /v1/calendars/{id}/bookings/{bid}       200 cancelled (same on repeat) / 404
//	GET    /healthz                                200 when the database answers
//
// Not implemented (bookline features outside the comparison): Idempotency-Key,
// 202 pending answers, request lookups, events, API keys.
//
// It uses net/http rather than Fiber on purpose: it is what a typical
// "just use PostgreSQL" service would be written with, and its per-request
// cost is small next to a database round trip and commit, so it does not
// decide the comparison (bookline's own routes run on Fiber).
package main

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

const schema = `
CREATE EXTENSION IF NOT EXISTS btree_gist;
CREATE TABLE IF NOT EXISTS calendars (
	id         text PRIMARY KEY,
	name       text NOT NULL,
	timezone   text NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS bookings (
	id           text PRIMARY KEY,
	calendar_id  text NOT NULL REFERENCES calendars (id),
	start_time   timestamptz NOT NULL,
	end_time     timestamptz NOT NULL,
	customer     text NOT NULL,
	status       text NOT NULL,
	created_at   timestamptz NOT NULL,
	cancelled_at timestamptz,
	metadata     jsonb NOT NULL DEFAULT '{}',
	CONSTRAINT bookings_no_overlap EXCLUDE USING gist
		(calendar_id WITH =, tstzrange(start_time, end_time, '[)') WITH &&) WHERE (status = 'confirmed')
);
CREATE INDEX IF NOT EXISTS bookings_by_start ON bookings (calendar_id, start_time, id) WHERE status = 'confirmed';

-- book answers a visible conflict at once; otherwise it locks the calendar
-- row (serialises bookings per calendar: no exclusion-check deadlocks),
-- looks for a conflicting confirmed booking again and inserts. Each statement of a PL/pgSQL function takes a fresh snapshot in
-- READ COMMITTED, so the conflict query sees what the previous lock holder
-- committed. result: 0 booked, 1 calendar not found, 2 slot taken.
CREATE OR REPLACE FUNCTION book(p_id text, p_cal text, p_start timestamptz, p_end timestamptz,
		p_customer text, p_metadata jsonb, p_precheck boolean,
		OUT result int, OUT conflict_start timestamptz, OUT conflict_end timestamptz, OUT created timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
	-- Fast path without the lock: a committed conflicting booking is a true
	-- conflict, and a transaction that only reads needs no WAL flush.
	IF p_precheck THEN
		SELECT b.start_time, b.end_time INTO conflict_start, conflict_end FROM bookings b
			WHERE b.calendar_id = p_cal AND b.status = 'confirmed'
			  AND tstzrange(b.start_time, b.end_time, '[)') && tstzrange(p_start, p_end, '[)')
			ORDER BY b.start_time LIMIT 1;
		IF FOUND THEN
			result := 2;
			RETURN;
		END IF;
	END IF;
	PERFORM 1 FROM calendars WHERE id = p_cal FOR UPDATE;
	IF NOT FOUND THEN
		result := 1;
		RETURN;
	END IF;
	SELECT b.start_time, b.end_time INTO conflict_start, conflict_end FROM bookings b
		WHERE b.calendar_id = p_cal AND b.status = 'confirmed'
		  AND tstzrange(b.start_time, b.end_time, '[)') && tstzrange(p_start, p_end, '[)')
		ORDER BY b.start_time LIMIT 1;
	IF FOUND THEN
		result := 2;
		RETURN;
	END IF;
	created := date_trunc('milliseconds', clock_timestamp());
	INSERT INTO bookings (id, calendar_id, start_time, end_time, customer, status, created_at, metadata)
		VALUES (p_id, p_cal, p_start, p_end, p_customer, 'confirmed', created, p_metadata);
	result := 0;
END $$;
`

type config struct {
	dsn      string
	addr     string
	maxConns int
	reset    bool
	lockOnly bool
}

func main() {
	var c config
	flag.StringVar(&c.dsn, "dsn", envOr("PGBASELINE_DSN", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL connection string (env PGBASELINE_DSN)")
	flag.StringVar(&c.addr, "http-addr", envOr("PGBASELINE_HTTP_ADDR", "127.0.0.1:8090"), "HTTP listen address (env PGBASELINE_HTTP_ADDR)")
	flag.IntVar(&c.maxConns, "max-conns", 64, "connection pool size; at least the number of concurrent clients, so no request queues for a connection (PostgreSQL groups concurrent commits into one WAL flush; 64 measured best for 64 clients on 2 cores)")
	flag.BoolVar(&c.reset, "reset", false, "drop and recreate the tables at start")
	flag.BoolVar(&c.lockOnly, "lock-only", false, "always take the calendar lock first (FIELD-NOTES' variant), without the lock-free conflict pre-check")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("pgbaseline", "err", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	pc, err := pgxpool.ParseConfig(c.dsn)
	if err != nil {
		return err
	}
	pc.MaxConns = int32(c.maxConns)
	pc.MinConns = int32(min(c.maxConns, 4*runtime.NumCPU()))
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	if c.reset {
		if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS bookings; DROP TABLE IF EXISTS calendars;`); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	srv := &http.Server{
		Handler:           (&server{db: pool, log: log, precheck: !c.lockOnly}).mux(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	log.Info("pgbaseline (comparison baseline, not bookline) listening", "addr", ln.Addr().String(), "max_conns", c.maxConns, "lock_only", c.lockOnly)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

type server struct {
	db       *pgxpool.Pool
	log      *slog.Logger
	precheck bool // answer visible conflicts before taking the calendar lock
}

func (s *server) mux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /healthz", s.healthz)
	m.HandleFunc("PUT /v1/calendars/{cal}", s.putCalendar)
	m.HandleFunc("GET /v1/calendars/{cal}", s.getCalendar)
	m.HandleFunc("POST /v1/calendars/{cal}/bookings", s.createBooking)
	m.HandleFunc("GET /v1/calendars/{cal}/bookings", s.listBookings)
	m.HandleFunc("GET /v1/calendars/{cal}/bookings/{id}", s.getBooking)
	m.HandleFunc("DELETE /v1/calendars/{cal}/bookings/{id}", s.cancelBooking)
	return m
}

// Model and error shapes: the same JSON as bookline's.

type calendar struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Timezone  string    `json:"timezone"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

type booking struct {
	ID          string          `json:"id"`
	CalendarID  string          `json:"calendar_id"`
	Start       time.Time       `json:"start"`
	End         time.Time       `json:"end"`
	Customer    string          `json:"customer"`
	Status      string          `json:"status"`
	CreatedAt   time.Time       `json:"created_at"`
	CancelledAt *time.Time      `json:"cancelled_at,omitempty"`
	Metadata    json.RawMessage `json:"metadata"`
}

type interval struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

type apiError struct {
	status   int
	Code     string       `json:"code"`
	Message  string       `json:"message"`
	Details  []fieldError `json:"details,omitempty"`
	Conflict *interval    `json:"conflict,omitempty"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

var (
	errCalendarNotFound = &apiError{status: 404, Code: "calendar_not_found", Message: "calendar not found"}
	errBookingNotFound  = &apiError{status: 404, Code: "booking_not_found", Message: "booking not found"}
)

func invalid(d ...fieldError) *apiError {
	return &apiError{status: 400, Code: "invalid_request", Message: "the request is invalid", Details: d}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = 500, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		s.log.Error("internal", "method", r.Method, "path", r.URL.Path, "err", err)
		ae = &apiError{status: 500, Code: "internal", Message: "internal error"}
	}
	writeJSON(w, ae.status, map[string]*apiError{"error": ae})
}

// Validation: the same rules as bookline's.

var idRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

const (
	maxBody     = 64 << 10
	maxMetadata = 16 << 10
	maxDuration = 7 * 24 * time.Hour
)

func calendarID(r *http.Request) (string, error) {
	id := r.PathValue("cal")
	if !idRe.MatchString(id) {
		return "", invalid(fieldError{"calendarId", "must match [A-Za-z0-9_-]{1,64}"})
	}
	return id, nil
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{status: 413, Code: "payload_too_large", Message: "the request body is too large"}
		}
		return invalid(fieldError{"body", "invalid JSON: " + err.Error()})
	}
	return nil
}

func parseTime(field, v string, bad *[]fieldError) time.Time {
	if v == "" {
		*bad = append(*bad, fieldError{field, "is required (RFC 3339, e.g. 2026-12-01T10:00:00Z)"})
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil || t.Year() < 1970 || t.Year() > 2199 {
		*bad = append(*bad, fieldError{field, "must be an RFC 3339 time with offset between years 1970 and 2199"})
		return time.Time{}
	}
	return t.UTC()
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	if err := s.db.Ping(r.Context()); err != nil {
		writeJSON(w, 503, map[string]string{"status": "unavailable"})
		return
	}
	writeJSON(w, 200, map[string]string{"status": "ok"})
}

func (s *server) putCalendar(w http.ResponseWriter, r *http.Request) {
	id, err := calendarID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req struct {
		Name     string `json:"name"`
		Timezone string `json:"timezone"`
	}
	if err := decodeBody(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Timezone == "" {
		req.Timezone = "UTC"
	}
	if _, err := time.LoadLocation(req.Timezone); err != nil || req.Timezone == "Local" {
		s.fail(w, r, invalid(fieldError{"timezone", "must be an IANA time zone name, e.g. Europe/Berlin"}))
		return
	}
	if utf8.RuneCountInString(req.Name) > 200 {
		s.fail(w, r, invalid(fieldError{"name", "must be at most 200 characters"}))
		return
	}
	c := calendar{ID: id, Name: req.Name, Timezone: req.Timezone}
	var inserted bool
	err = s.db.QueryRow(r.Context(), `
		INSERT INTO calendars (id, name, timezone, created_at, updated_at)
		VALUES ($1, $2, $3, date_trunc('milliseconds', now()), date_trunc('milliseconds', now()))
		ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, timezone = EXCLUDED.timezone, updated_at = EXCLUDED.updated_at
		RETURNING created_at, updated_at, xmax = 0`, id, req.Name, req.Timezone).Scan(&c.CreatedAt, &c.UpdatedAt, &inserted)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	status := 200
	if inserted {
		status = 201
	}
	writeJSON(w, status, c)
}

func (s *server) getCalendar(w http.ResponseWriter, r *http.Request) {
	id, err := calendarID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	c := calendar{ID: id}
	err = s.db.QueryRow(r.Context(), `SELECT name, timezone, created_at, updated_at FROM calendars WHERE id = $1`, id).
		Scan(&c.Name, &c.Timezone, &c.CreatedAt, &c.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		err = errCalendarNotFound
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	writeJSON(w, 200, c)
}

var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// newBookingID returns 26 characters of base32hex, the shape of bookline's ids.
func newBookingID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return idEncoding.EncodeToString(b[:])
}

func (s *server) createBooking(w http.ResponseWriter, r *http.Request) {
	cal, err := calendarID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req struct {
		Start    string          `json:"start"`
		End      string          `json:"end"`
		Customer string          `json:"customer"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := decodeBody(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	var bad []fieldError
	start, end := parseTime("start", req.Start, &bad), parseTime("end", req.End, &bad)
	if len(bad) == 0 {
		if d := end.Sub(start); d <= 0 {
			bad = append(bad, fieldError{"end", "must be after start"})
		} else if d > maxDuration {
			bad = append(bad, fieldError{"end", "booking may last at most 168h0m0s"})
		}
	}
	if n := utf8.RuneCountInString(req.Customer); n == 0 || n > 200 {
		bad = append(bad, fieldError{"customer", "is required, at most 200 characters"})
	}
	md := []byte(strings.TrimSpace(string(req.Metadata)))
	if len(md) == 0 || string(md) == "null" {
		md = []byte("{}")
	} else if len(md) > maxMetadata || md[0] != '{' || !json.Valid(md) {
		bad = append(bad, fieldError{"metadata", "must be a JSON object of at most 16384 bytes"})
	}
	if len(bad) > 0 {
		s.fail(w, r, invalid(bad...))
		return
	}
	b := booking{ID: newBookingID(), CalendarID: cal, Start: start, End: end, Customer: req.Customer, Status: "confirmed"}
	var result int
	var cs, ce, created *time.Time
	err = s.db.QueryRow(r.Context(), `SELECT result, conflict_start, conflict_end, created FROM book($1, $2, $3, $4, $5, $6, $7)`,
		b.ID, cal, start, end, req.Customer, string(md), s.precheck).Scan(&result, &cs, &ce, &created)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23P01":
		// Cannot happen while book() holds the calendar lock; kept so the
		// constraint, not the lock, is what a client finally relies on.
		s.fail(w, r, &apiError{status: 409, Code: "slot_taken", Message: "the requested interval overlaps a confirmed booking"})
		return
	case err != nil:
		s.fail(w, r, err)
		return
	case result == 1:
		s.fail(w, r, errCalendarNotFound)
		return
	case result == 2:
		s.fail(w, r, &apiError{status: 409, Code: "slot_taken", Message: "the requested interval overlaps a confirmed booking",
			Conflict: &interval{Start: cs.UTC(), End: ce.UTC()}})
		return
	}
	b.CreatedAt = created.UTC()
	b.Metadata = md
	writeJSON(w, 201, b)
}

const bookingColumns = `id, calendar_id, start_time, end_time, customer, status, created_at, cancelled_at, metadata`

func scanBooking(row pgx.Row) (booking, error) {
	var b booking
	var md []byte
	err := row.Scan(&b.ID, &b.CalendarID, &b.Start, &b.End, &b.Customer, &b.Status, &b.CreatedAt, &b.CancelledAt, &md)
	b.Start, b.End, b.CreatedAt = b.Start.UTC(), b.End.UTC(), b.CreatedAt.UTC()
	if b.CancelledAt != nil {
		t := b.CancelledAt.UTC()
		b.CancelledAt = &t
	}
	b.Metadata = md
	return b, err
}

func (s *server) getBooking(w http.ResponseWriter, r *http.Request) {
	cal, err := calendarID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	b, err := scanBooking(s.db.QueryRow(r.Context(), `SELECT `+bookingColumns+` FROM bookings WHERE calendar_id = $1 AND id = $2`, cal, r.PathValue("id")))
	if errors.Is(err, pgx.ErrNoRows) {
		err = errBookingNotFound
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, b)
}

func (s *server) cancelBooking(w http.ResponseWriter, r *http.Request) {
	cal, err := calendarID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	id := r.PathValue("id")
	// A cancel only frees a slot, so it needs no calendar lock: the
	// constraint cannot be violated by it.
	b, err := scanBooking(s.db.QueryRow(r.Context(), `
		UPDATE bookings SET status = 'cancelled', cancelled_at = date_trunc('milliseconds', clock_timestamp())
		WHERE calendar_id = $1 AND id = $2 AND status = 'confirmed' RETURNING `+bookingColumns, cal, id))
	if errors.Is(err, pgx.ErrNoRows) { // already cancelled (same answer again) or unknown
		b, err = scanBooking(s.db.QueryRow(r.Context(), `SELECT `+bookingColumns+` FROM bookings WHERE calendar_id = $1 AND id = $2`, cal, id))
		if errors.Is(err, pgx.ErrNoRows) {
			err = errBookingNotFound
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, b)
}

type listResponse struct {
	Bookings   []booking `json:"bookings"`
	NextCursor *string   `json:"next_cursor"`
}

func (s *server) listBookings(w http.ResponseWriter, r *http.Request) {
	cal, err := calendarID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	var bad []fieldError
	from := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
	if v := q.Get("from"); v != "" {
		from = parseTime("from", v, &bad)
	}
	if v := q.Get("to"); v != "" {
		to = parseTime("to", v, &bad)
	}
	if len(bad) == 0 && !to.After(from) {
		bad = append(bad, fieldError{"to", "must be after from"})
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			bad = append(bad, fieldError{"limit", "must be an integer from 1 to 1000"})
		}
		limit = n
	}
	// The cursor is the (start, id) of the last booking of the previous page.
	afterStart, afterID := time.Time{}, ""
	if v := q.Get("cursor"); v != "" {
		raw, err := base64.RawURLEncoding.DecodeString(v)
		ns, id, ok := strings.Cut(string(raw), "|")
		n, perr := strconv.ParseInt(ns, 10, 64)
		if err != nil || !ok || perr != nil {
			bad = append(bad, fieldError{"cursor", "is not a cursor returned by this API"})
		}
		afterStart, afterID = time.Unix(0, n).UTC(), id
	}
	if len(bad) > 0 {
		s.fail(w, r, invalid(bad...))
		return
	}
	rows, err := s.db.Query(r.Context(), `SELECT `+bookingColumns+` FROM bookings
		WHERE calendar_id = $1 AND status = 'confirmed' AND start_time < $3 AND end_time > $2
		  AND ($5 = '' OR (start_time, id) > ($4, $5))
		ORDER BY start_time, id LIMIT $6`, cal, from, to, afterStart, afterID, limit+1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	resp := listResponse{Bookings: []booking{}}
	for rows.Next() {
		b, err := scanBooking(rows)
		if err != nil {
			rows.Close()
			s.fail(w, r, err)
			return
		}
		resp.Bookings = append(resp.Bookings, b)
	}
	if err := rows.Err(); err != nil {
		s.fail(w, r, err)
		return
	}
	if len(resp.Bookings) > limit {
		resp.Bookings = resp.Bookings[:limit]
		last := resp.Bookings[limit-1]
		cur := base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(last.Start.UnixNano(), 10) + "|" + last.ID))
		resp.NextCursor = &cur
	}
	if len(resp.Bookings) == 0 {
		var one int
		if err := s.db.QueryRow(r.Context(), `SELECT 1 FROM calendars WHERE id = $1`, cal).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			s.fail(w, r, errCalendarNotFound)
			return
		} else if err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, 200, resp)
}
