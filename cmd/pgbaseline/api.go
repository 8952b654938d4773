package main

// The HTTP API: bookline's routes, answered from PostgreSQL.

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

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
	CalendarIDs []string        `json:"calendar_ids,omitempty"` // a collective's members
	Start       time.Time       `json:"start"`
	End         time.Time       `json:"end"`
	Customer    string          `json:"customer"`
	Status      string          `json:"status"`
	CreatedAt   time.Time       `json:"created_at"`
	CancelledAt *time.Time      `json:"cancelled_at,omitempty"`
	Metadata    json.RawMessage `json:"metadata"`
}

type interval struct {
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	CalendarID string    `json:"calendar_id,omitempty"` // collectives: the member that refused
	BookingID  string    `json:"booking_id,omitempty"`
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
	errSlotTaken        = &apiError{status: 409, Code: "slot_taken", Message: "the requested interval overlaps a confirmed booking"}
)

func invalid(d ...fieldError) *apiError {
	return &apiError{status: 400, Code: "invalid_request", Message: "the request is invalid", Details: d}
}

// errorHandler turns what a handler (or Fiber itself: unknown route, body
// too large, malformed request) returns into bookline's error shape. Only
// internal errors are logged; their detail is not shown.
func (s *server) errorHandler(c *fiber.Ctx, err error) error {
	var ae *apiError
	var fe *fiber.Error
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &fe) && fe.Code < 500:
		switch fe.Code {
		case fiber.StatusNotFound:
			ae = &apiError{status: fe.Code, Code: "not_found", Message: "no such route"}
		case fiber.StatusMethodNotAllowed:
			ae = &apiError{status: fe.Code, Code: "method_not_allowed", Message: "method not allowed on this route"}
		case fiber.StatusRequestEntityTooLarge:
			ae = &apiError{status: fe.Code, Code: "payload_too_large", Message: "the request body is too large"}
		default:
			ae = &apiError{status: fe.Code, Code: "invalid_request", Message: fe.Message}
		}
	default:
		s.log.Error("internal", "method", c.Method(), "path", c.Path(), "err", err)
		ae = &apiError{status: 500, Code: "internal", Message: "internal error"}
	}
	return c.Status(ae.status).JSON(map[string]*apiError{"error": ae})
}

// Validation: the same rules as bookline's.

var idRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

const (
	maxBody     = 64 << 10
	maxMetadata = 16 << 10
	maxDuration = 7 * 24 * time.Hour
)

func calendarID(c *fiber.Ctx) (string, error) {
	id := c.Params("cal")
	if !idRe.MatchString(id) {
		return "", invalid(fieldError{"calendarId", "must match [A-Za-z0-9_-]{1,64}"})
	}
	return id, nil
}

// decodeBody decodes the first JSON value of the body, as a json.Decoder on
// the request stream would (Fiber has already refused bodies over maxBody).
func decodeBody(c *fiber.Ctx, v any) error {
	if err := json.NewDecoder(bytes.NewReader(c.Body())).Decode(v); err != nil {
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

func (s *server) healthz(c *fiber.Ctx) error {
	if err := s.db.Ping(c.UserContext()); err != nil {
		return c.Status(503).JSON(map[string]string{"status": "unavailable"})
	}
	return c.JSON(map[string]string{"status": "ok"})
}

func (s *server) putCalendar(c *fiber.Ctx) error {
	id, err := calendarID(c)
	if err != nil {
		return err
	}
	var req struct {
		Name     string `json:"name"`
		Timezone string `json:"timezone"`
	}
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Timezone == "" {
		req.Timezone = "UTC"
	}
	if _, err := time.LoadLocation(req.Timezone); err != nil || req.Timezone == "Local" {
		return invalid(fieldError{"timezone", "must be an IANA time zone name, e.g. Europe/Berlin"})
	}
	if utf8.RuneCountInString(req.Name) > 200 {
		return invalid(fieldError{"name", "must be at most 200 characters"})
	}
	cal := calendar{ID: id, Name: req.Name, Timezone: req.Timezone}
	var inserted bool
	err = s.db.QueryRow(c.UserContext(), `
		INSERT INTO calendars (id, name, timezone, created_at, updated_at)
		VALUES ($1, $2, $3, date_trunc('milliseconds', now()), date_trunc('milliseconds', now()))
		ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, timezone = EXCLUDED.timezone, updated_at = EXCLUDED.updated_at
		RETURNING created_at, updated_at, xmax = 0`, id, req.Name, req.Timezone).Scan(&cal.CreatedAt, &cal.UpdatedAt, &inserted)
	if err != nil {
		return err
	}
	cal.CreatedAt, cal.UpdatedAt = cal.CreatedAt.UTC(), cal.UpdatedAt.UTC()
	status := 200
	if inserted {
		status = 201
	}
	return c.Status(status).JSON(cal)
}

func (s *server) getCalendar(c *fiber.Ctx) error {
	id, err := calendarID(c)
	if err != nil {
		return err
	}
	cal := calendar{ID: id}
	err = s.db.QueryRow(c.UserContext(), `SELECT name, timezone, created_at, updated_at FROM calendars WHERE id = $1`, id).
		Scan(&cal.Name, &cal.Timezone, &cal.CreatedAt, &cal.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return errCalendarNotFound
	}
	if err != nil {
		return err
	}
	cal.CreatedAt, cal.UpdatedAt = cal.CreatedAt.UTC(), cal.UpdatedAt.UTC()
	return c.JSON(cal)
}

var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// newBookingID returns 26 characters of base32hex, the shape of bookline's ids.
func newBookingID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return idEncoding.EncodeToString(b[:])
}

// bookingBody is the body of a booking; calendar_ids only in a collective's.
type bookingBody struct {
	CalendarIDs []string        `json:"calendar_ids"`
	Start       string          `json:"start"`
	End         string          `json:"end"`
	Customer    string          `json:"customer"`
	Metadata    json.RawMessage `json:"metadata"`
}

// bookingRequest decodes and validates a booking body: the same rules and
// messages as bookline's. md is the metadata to store ("{}" when absent).
func bookingRequest(c *fiber.Ctx) (start, end time.Time, customer string, md []byte, err error) {
	var req bookingBody
	if err := decodeBody(c, &req); err != nil {
		return start, end, "", nil, err
	}
	return validBooking(&req, nil)
}

// validBooking validates a decoded booking body, adding its problems to
// those already found (bad).
func validBooking(req *bookingBody, bad []fieldError) (start, end time.Time, customer string, md []byte, err error) {
	start, end = parseTime("start", req.Start, &bad), parseTime("end", req.End, &bad)
	if !start.IsZero() && !end.IsZero() {
		if d := end.Sub(start); d <= 0 {
			bad = append(bad, fieldError{"end", "must be after start"})
		} else if d > maxDuration {
			bad = append(bad, fieldError{"end", "booking may last at most 168h0m0s"})
		}
	}
	if n := utf8.RuneCountInString(req.Customer); n == 0 || n > 200 {
		bad = append(bad, fieldError{"customer", "is required, at most 200 characters"})
	}
	md = bytes.TrimSpace(req.Metadata)
	if len(md) == 0 || string(md) == "null" {
		md = []byte("{}")
	} else if len(md) > maxMetadata || md[0] != '{' || !json.Valid(md) {
		bad = append(bad, fieldError{"metadata", "must be a JSON object of at most 16384 bytes"})
	}
	if len(bad) > 0 {
		return start, end, "", nil, invalid(bad...)
	}
	return start, end, req.Customer, md, nil
}

func (s *server) createBooking(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	start, end, customer, md, err := bookingRequest(c)
	if err != nil {
		return err
	}
	b := booking{ID: newBookingID(), CalendarID: cal, Start: start, End: end, Customer: customer, Status: "confirmed", Metadata: md}
	var result int
	var cs, ce, created *time.Time
	err = s.db.QueryRow(c.UserContext(), `SELECT result, conflict_start, conflict_end, created FROM book($1, $2, $3, $4, $5, $6, $7)`,
		b.ID, cal, start, end, customer, string(md), s.precheck).Scan(&result, &cs, &ce, &created)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23P01":
		// Cannot happen while book() holds the calendar lock; kept so the
		// constraint, not the lock, is what a client finally relies on.
		return errSlotTaken
	case err != nil:
		return err
	case result == 1:
		return errCalendarNotFound
	case result == 2:
		conflict := *errSlotTaken
		conflict.Conflict = &interval{Start: cs.UTC(), End: ce.UTC()}
		return &conflict
	}
	b.CreatedAt = created.UTC()
	return c.Status(201).JSON(b)
}

// maxMembers is bookline's limit of calendars in one collective booking.
const maxMembers = 16

// collectiveMembers checks and sorts a collective's calendar ids, as
// bookline does: the answer lists them in id order, and the transaction
// locks them in that order.
func collectiveMembers(in []string) ([]string, []fieldError) {
	bad := func(m string) []fieldError { return []fieldError{{"calendar_ids", m}} }
	if len(in) < 2 || len(in) > maxMembers {
		return nil, bad("must list 2 to 16 calendars")
	}
	ids := slices.Clone(in)
	for _, id := range ids {
		if !idRe.MatchString(id) {
			return nil, bad("must be calendar ids ([A-Za-z0-9_-]{1,64})")
		}
	}
	slices.Sort(ids)
	if len(slices.Compact(slices.Clone(ids))) != len(ids) {
		return nil, bad("must not list a calendar twice")
	}
	return ids, nil
}

// createCollective books one interval on every listed calendar or on none,
// in one transaction (book_collective): bookline's POST /v1/bookings.
func (s *server) createCollective(c *fiber.Ctx) error {
	var req bookingBody
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	ids, bad := collectiveMembers(req.CalendarIDs)
	start, end, customer, md, err := validBooking(&req, bad)
	if err != nil {
		return err
	}
	b := booking{ID: newBookingID(), CalendarID: ids[0], CalendarIDs: ids, Start: start, End: end, Customer: customer,
		Status: "confirmed", Metadata: md}
	var result int
	var badCal, conflictID *string
	var cs, ce, created *time.Time
	err = s.db.QueryRow(c.UserContext(), `SELECT result, bad_cal, conflict_id, conflict_start, conflict_end, created
		FROM book_collective($1, $2, $3, $4, $5, $6, $7)`,
		b.ID, ids, start, end, customer, string(md), s.precheck).Scan(&result, &badCal, &conflictID, &cs, &ce, &created)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23P01":
		// Cannot happen while book_collective holds the members' locks.
		return errSlotTaken
	case err != nil:
		return err
	case result == 1:
		return &apiError{status: 404, Code: "calendar_not_found", Message: *badCal + ": calendar not found"}
	case result == 2:
		conflict := *errSlotTaken
		conflict.Message = *badCal + ": " + conflict.Message
		conflict.Conflict = &interval{Start: cs.UTC(), End: ce.UTC(), CalendarID: *badCal, BookingID: *conflictID}
		return &conflict
	}
	b.CreatedAt = created.UTC()
	return c.Status(201).JSON(b)
}

const bookingColumns = `id, calendar_id, calendar_ids, start_time, end_time, customer, status, created_at, cancelled_at, metadata`

func scanBooking(row pgx.Row) (booking, error) {
	var b booking
	var md []byte
	err := row.Scan(&b.ID, &b.CalendarID, &b.CalendarIDs, &b.Start, &b.End, &b.Customer, &b.Status, &b.CreatedAt, &b.CancelledAt, &md)
	b.Start, b.End, b.CreatedAt = b.Start.UTC(), b.End.UTC(), b.CreatedAt.UTC()
	if b.CancelledAt != nil {
		t := b.CancelledAt.UTC()
		b.CancelledAt = &t
	}
	b.Metadata = md
	return b, err
}

func (s *server) getBooking(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	b, err := scanBooking(s.db.QueryRow(c.UserContext(), `SELECT `+bookingColumns+` FROM bookings WHERE calendar_id = $1 AND id = $2`, cal, c.Params("id")))
	if errors.Is(err, pgx.ErrNoRows) {
		return errBookingNotFound
	}
	if err != nil {
		return err
	}
	return c.JSON(b)
}

func (s *server) cancelBooking(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	id := c.Params("id")
	ctx := c.UserContext()
	// A cancel only frees a slot, so it needs no calendar lock: the
	// constraint cannot be violated by it.
	b, err := scanBooking(s.db.QueryRow(ctx, `
		UPDATE bookings SET status = 'cancelled', cancelled_at = date_trunc('milliseconds', clock_timestamp())
		WHERE calendar_id = $1 AND id = $2 AND status = 'confirmed' RETURNING `+bookingColumns, cal, id))
	if errors.Is(err, pgx.ErrNoRows) { // already cancelled (same answer again) or unknown
		b, err = scanBooking(s.db.QueryRow(ctx, `SELECT `+bookingColumns+` FROM bookings WHERE calendar_id = $1 AND id = $2`, cal, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return errBookingNotFound
		}
	}
	if err != nil {
		return err
	}
	return c.JSON(b)
}

type listResponse struct {
	Bookings   []booking `json:"bookings"`
	NextCursor *string   `json:"next_cursor"`
}

// listQuery is a validated list request.
type listQuery struct {
	from, to   time.Time
	limit      int
	afterStart time.Time // the cursor: (start, id) of the previous page's last booking
	afterID    string
}

func parseListQuery(c *fiber.Ctx) (listQuery, error) {
	var bad []fieldError
	q := listQuery{
		from:  time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		to:    time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC),
		limit: 100,
	}
	if v := c.Query("from"); v != "" {
		q.from = parseTime("from", v, &bad)
	}
	if v := c.Query("to"); v != "" {
		q.to = parseTime("to", v, &bad)
	}
	if len(bad) == 0 && !q.to.After(q.from) {
		bad = append(bad, fieldError{"to", "must be after from"})
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			bad = append(bad, fieldError{"limit", "must be an integer from 1 to 1000"})
		}
		q.limit = n
	}
	if v := c.Query("cursor"); v != "" {
		raw, err := base64.RawURLEncoding.DecodeString(v)
		ns, id, ok := strings.Cut(string(raw), "|")
		n, perr := strconv.ParseInt(ns, 10, 64)
		if err != nil || !ok || perr != nil {
			bad = append(bad, fieldError{"cursor", "is not a cursor returned by this API"})
		}
		q.afterStart, q.afterID = time.Unix(0, n).UTC(), id
	}
	if len(bad) > 0 {
		return q, invalid(bad...)
	}
	return q, nil
}

func (s *server) listBookings(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	q, err := parseListQuery(c)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	rows, err := s.db.Query(ctx, `SELECT `+bookingColumns+` FROM bookings
		WHERE calendar_id = $1 AND status = 'confirmed' AND start_time < $3 AND end_time > $2
		  AND ($5 = '' OR (start_time, id) > ($4, $5))
		ORDER BY start_time, id LIMIT $6`, cal, q.from, q.to, q.afterStart, q.afterID, q.limit+1)
	if err != nil {
		return err
	}
	resp := listResponse{Bookings: []booking{}}
	for rows.Next() {
		b, err := scanBooking(rows)
		if err != nil {
			rows.Close()
			return err
		}
		resp.Bookings = append(resp.Bookings, b)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(resp.Bookings) > q.limit {
		resp.Bookings = resp.Bookings[:q.limit]
		last := resp.Bookings[q.limit-1]
		cur := base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(last.Start.UnixNano(), 10) + "|" + last.ID))
		resp.NextCursor = &cur
	}
	if len(resp.Bookings) == 0 {
		var one int
		if err := s.db.QueryRow(ctx, `SELECT 1 FROM calendars WHERE id = $1`, cal).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return errCalendarNotFound
		} else if err != nil {
			return err
		}
	}
	return c.JSON(resp)
}
