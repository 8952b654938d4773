package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

type calendarRequest struct {
	Name     string `json:"name"`
	Timezone string `json:"timezone"`
	// The booking rules, flat in the body (see data.Rules).
	data.Rules
	// Google links the calendar to a Google calendar (httpapi/google.go).
	Google *data.ExternalLink `json:"google"`
}

// MaxEventTitleLen bounds a link's event title template.
const MaxEventTitleLen = 200

func (s *Server) putCalendar(c *fiber.Ctx) error {
	var req calendarRequest
	cal, reqID, err := writeRequest(c, &req)
	if err != nil {
		return err
	}
	if g := req.Google; g != nil {
		// The writer ignores these (they change no decision); the API
		// keeps out what the mirror could not use.
		var bad []actor.FieldError
		switch g.Visibility {
		case "", "default", "public", "private", "confidential":
		default:
			bad = append(bad, actor.FieldError{Field: "google.visibility", Message: "must be default, public, private or confidential"})
		}
		if n := utf8.RuneCountInString(g.EventTitle); n > MaxEventTitleLen || !utf8.ValidString(g.EventTitle) {
			bad = append(bad, actor.FieldError{Field: "google.event_title", Message: fmt.Sprintf("must be valid UTF-8, at most %d characters", MaxEventTitleLen)})
		}
		if len(bad) > 0 {
			return invalid(bad...)
		}
	}
	cmd := &actor.Command{V: actor.SchemaVersion, Type: actor.TypeCalendarUpsert, RequestID: reqID, CalendarID: cal,
		Calendar: &actor.CalendarSpec{Name: req.Name, Timezone: req.Timezone, Rules: req.Rules, Link: req.Google}}
	return s.submit(c, cmd)
}

type bookingRequest struct {
	Start    string          `json:"start"`
	End      string          `json:"end"`
	Customer string          `json:"customer"`
	Metadata json.RawMessage `json:"metadata"`
	// A series (docs/api.md, "Recurring series"): read leniently, so that
	// the command's validation names what is wrong with them.
	Recurrence *actor.RecurrenceSpec `json:"recurrence"`
	OnConflict actor.LenientString   `json:"on_conflict"`
}

// Write bodies refuse members they do not define (decodeBody): a client
// that sends one believes it does something, and it would do nothing.
func (*bookingRequest) strictBody()    {}
func (*calendarRequest) strictBody()   {}
func (*rescheduleRequest) strictBody() {}

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
	cmd := &actor.Command{Type: actor.TypeBookingCreate, RequestID: reqID, CalendarID: cal, Booking: spec}
	cmd.V = cmd.MinVersion()
	if err := s.chargeSeries(c, spec); err != nil {
		return err
	}
	return s.submit(c, cmd)
}

// chargeSeries charges a series (a booking or hold with a recurrence): it
// is decided as one command, but its writer decides every occurrence, so
// it costs a token per SeriesOccurrencesPerToken occurrences it may make.
func (s *Server) chargeSeries(c *fiber.Ctx, spec *actor.BookingSpec) error {
	if spec.Recurrence == nil {
		return nil
	}
	return s.charge(c, costOf(actor.SeriesCount(spec), SeriesOccurrencesPerToken))
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
		if (typ == actor.TypeHoldConfirm || typ == actor.TypeHoldRelease) && !s.holdSecretOK(c, cal, id) {
			return notFound
		}
		if typ == actor.TypeHoldConfirm || typ == actor.TypeHoldRelease {
			if ids := s.collectivePartOf(c, cal, id); ids != nil {
				return s.settleCollectiveHold(c, cal, id, ids, typ == actor.TypeHoldConfirm)
			}
		}
		reqID, err := requestID(c)
		if err != nil {
			return err
		}
		cmd := &actor.Command{Type: typ, RequestID: reqID, CalendarID: cal, BookingID: id}
		if typ == actor.TypeBookingCancel && c.Query("scope") == "" {
			if ids := s.collectivePartOf(c, cal, id); ids != nil {
				return s.cancelCollective(c, cal, id, ids)
			}
		}
		if typ == actor.TypeBookingCancel {
			switch scope := c.Query("scope"); scope {
			case "", actor.ScopeFollowing:
				cmd.Scope = actor.LenientString(scope)
			default:
				return invalid(actor.FieldError{Field: "scope", Message: "must be following (this occurrence and the later ones of its series), or absent"})
			}
		}
		cmd.V = cmd.MinVersion()
		return s.submit(c, cmd)
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
	if err := s.checkGoogle(cmd); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.withTrace(context.Background(), requestIDOf(c)), s.cfg.ReplyTimeout)
	defer cancel()
	if reply, ok, err := s.unscopedRecord(ctx, c, cmd); err != nil {
		s.log.Warn("reading the record of an unscoped key failed", "request_id", cmd.RequestID, "trace_id", requestIDOf(c), "err", err)
		return &Error{Code: CodeUnavailable, Message: "bookings cannot be taken right now, retry later"}
	} else if ok {
		return s.writeReply(c, reply)
	}
	reply, err := s.backend.Submit(ctx, cmd, cmd.Fingerprint())
	switch {
	case isPending(err):
		c.Location("/v1/calendars/" + cmd.CalendarID + "/requests/" + cmd.RequestID)
		return c.Status(http.StatusAccepted).JSON(fiber.Map{"status": "pending", "request_id": cmd.RequestID})
	case isUnavailable(err):
		s.log.Warn("command not stored", "request_id", cmd.RequestID, "trace_id", requestIDOf(c), "err", err)
		return &Error{Code: CodeUnavailable, Message: "bookings cannot be taken right now, retry later"}
	case err != nil:
		return err
	}
	return s.writeReply(c, reply)
}

// Answerer is the port that answers a command from the record of another
// request id when that record was made for the same request (same
// fingerprint), after bringing the index up to the calendar's last logged
// command (queue.Node).
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
	a := s.cfg.Ports.Answerer
	if a == nil {
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
	rf := s.cfg.Ports.Refuser
	if rf == nil {
		return nil, false
	}
	// In cluster mode the index is first brought up to the calendar's last
	// logged command, which takes a stream request: bounded, and on
	// failure the request goes to the log, which answers it or says why.
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReplyTimeout)
	defer cancel()
	reply, code, err := rf.Refused(ctx, cmd)
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
	typ, status, code, body, err := typedReplyAnswer(raw)
	if err != nil {
		return err
	}
	if typ == actor.TypeHoldCreate && code == "" {
		body = s.withHoldSecret(body)
	}
	return sendJSON(c, status, code, body)
}

// replyAnswer is the HTTP answer to a writer's reply: its status, the error
// code of a rejection ("" when accepted) and the body. The calendar or
// booking of an accepted reply is sent as the writer encoded it: read
// (actor.ReadReply) only as far as the status needs, not re-encoded. A
// rejection without details (a conflict, mostly) keeps its code, message
// and conflict as encoded too: they are encoded as the error object
// encodes them.
func replyAnswer(raw []byte) (status int, code string, body []byte, err error) {
	_, status, code, body, err = typedReplyAnswer(raw)
	return status, code, body, err
}

// typedReplyAnswer is replyAnswer with the command type of an accepted
// reply ("" for a rejection).
func typedReplyAnswer(raw []byte) (typ string, status int, code string, body []byte, err error) {
	var r actor.ReplyView
	if err := actor.ReadReply(raw, &r); err != nil {
		return "", 0, "", nil, err
	}
	if r.Outcome == actor.OutcomeRejected {
		if status, known := statusOf[r.Code]; known && r.ErrorMembers != nil {
			body := make([]byte, 0, len(r.ErrorMembers)+len(`{"error":{}}`))
			return "", status, r.Code, append(append(append(body, `{"error":{`...), r.ErrorMembers...), "}}"...), nil
		}
		e := &Error{Code: r.Code, Message: r.Message, Details: r.Details, Occurrences: r.Occurrences}
		if len(r.Conflict) > 0 {
			if err := json.Unmarshal(r.Conflict, &e.Conflict); err != nil {
				return "", 0, "", nil, err
			}
		}
		body, err := json.Marshal(errorBody{e})
		return "", e.Status(), e.Code, body, err
	}
	switch {
	case len(r.Calendar) > 0:
		if r.Created {
			return r.Type, http.StatusCreated, "", r.Calendar, nil
		}
		return r.Type, http.StatusOK, "", r.Calendar, nil
	case len(r.Pool) > 0:
		return r.Type, poolStatus(r.Created), "", r.Pool, nil
	case len(r.Booking) > 0 && len(r.Occurrences) > 0:
		// A series: its first booked occurrence, with every occurrence.
		body := make([]byte, 0, len(r.Booking)+len(r.Occurrences)+20)
		body = append(append(body, r.Booking[:len(r.Booking)-1]...), `,"occurrences":`...)
		body = append(append(body, r.Occurrences...), '}')
		return r.Type, createdStatus(r.Type), "", body, nil
	case len(r.Booking) > 0:
		return r.Type, createdStatus(r.Type), "", r.Booking, nil
	}
	// Accepted with a message only (hold.expire, busy.*, the system
	// commands of docs/protocol.md "Versions"): the reply itself.
	return r.Type, http.StatusOK, "", raw, nil
}

// errNotYourRequest answers a booker that asks for the outcome of a request
// id another API key made (or one made without keys, by an importer or by
// bookline itself).
var errNotYourRequest = &Error{Code: CodeForbidden, Message: "only the API key that sent this request, or an admin key, may read its outcome"}

// errUnknownRequest answers the outcome URL of a request id that has no
// record and can get none.
var errUnknownRequest = &Error{Code: CodeRequestNotFound, Message: "no request of this id is known for this calendar: it was never sent, or its record's retention ended"}

// OutcomeReader is the port that tells a request that may still be decided
// from one that never will be (queue.Node.Outcome):
// reply is the recorded answer of a decided request; pending says that the
// calendar still has commands to decide; neither means no such request.
// An error that is an UnavailableError means the log could not be read.
type OutcomeReader interface {
	Outcome(ctx context.Context, calID, reqID string) (reply []byte, pending bool, err error)
}

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
	if p := principal(c); p != nil && p.Role != RoleAdmin {
		if requestOwner(reqID) != p.Name {
			return errNotYourRequest
		}
		if !madeFor(reqID, p.Name) {
			return errUnknownRequest
		}
	}
	or := s.cfg.Ports.Outcomes
	if or == nil {
		return s.lookupRequest(c, cal, reqID)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.ReplyTimeout)
	defer cancel()
	reply, pending, err := or.Outcome(ctx, cal, reqID)
	switch {
	case isUnavailable(err):
		s.log.Warn("request outcome: reading the booking log failed", "calendar", cal, "trace_id", requestIDOf(c), "err", err)
		return &Error{Code: CodeUnavailable, Message: "this instance cannot read the booking log right now, retry later"}
	case err != nil:
		return err
	case reply != nil:
		return s.writeReply(c, reply)
	case pending:
		return pendingRequest(c, cal, reqID)
	}
	return errUnknownRequest
}

// lookupRequest answers from the index alone, for backends that cannot
// tell a pending request from an unknown one: both are pending.
func (s *Server) lookupRequest(c *fiber.Ctx, cal, reqID string) error {
	if err := s.syncRead(c, cal); err != nil {
		return err
	}
	reply, ok, err := s.backend.Lookup(cal, reqID)
	if err != nil {
		return err
	}
	if !ok {
		return pendingRequest(c, cal, reqID)
	}
	return s.writeReply(c, reply)
}

// pendingRequest is the 202 of a request not decided yet.
func pendingRequest(c *fiber.Ctx, cal, reqID string) error {
	c.Location("/v1/calendars/" + cal + "/requests/" + reqID)
	c.Set(fiber.HeaderRetryAfter, "1")
	return c.Status(http.StatusAccepted).JSON(fiber.Map{"status": "pending", "request_id": reqID})
}
