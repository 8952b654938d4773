package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
)

// Error codes of the HTTP API that are not actor rejection codes. Together
// with the actor's codes they are the stable "code" values of error bodies.
const (
	CodeNotFound         = "not_found"
	CodePayloadTooLarge  = "payload_too_large"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeRequestTimeout   = "request_timeout"
	CodeHeadersTooLarge  = "headers_too_large"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
	CodeUnauthorized     = "unauthorized"    // no API key, or not a configured one
	CodeForbidden        = "forbidden"       // the key's role or calendars do not allow this
	CodeRateLimited      = "rate_limited"    // too many requests for this key (or IP); see Retry-After
	CodeRangeTooLarge    = "range_too_large" // list range longer than --max-list-range
	// CodeRequestNotFound: the outcome URL of a request id with no record
	// that can get none (never sent, or its record's retention ended).
	CodeRequestNotFound = "request_not_found"
)

// statusOf maps every error code to its HTTP status: the one table.
var statusOf = map[string]int{
	actor.CodeInvalidRequest:       http.StatusBadRequest,
	actor.CodeInvalidCommand:       http.StatusBadRequest,
	actor.CodeCalendarNotFound:     http.StatusNotFound,
	actor.CodeBookingNotFound:      http.StatusNotFound,
	CodeNotFound:                   http.StatusNotFound,
	CodeRequestNotFound:            http.StatusNotFound,
	CodeMethodNotAllowed:           http.StatusMethodNotAllowed,
	CodeRequestTimeout:             http.StatusRequestTimeout,
	CodeHeadersTooLarge:            http.StatusRequestHeaderFieldsTooLarge,
	actor.CodeSlotTaken:            http.StatusConflict,
	actor.CodeExternalBusy:         http.StatusConflict,
	actor.CodeOutsideHours:         http.StatusUnprocessableEntity,
	actor.CodeMisaligned:           http.StatusUnprocessableEntity,
	actor.CodeDurationNotAllowed:   http.StatusUnprocessableEntity,
	actor.CodeTooSoon:              http.StatusUnprocessableEntity,
	actor.CodeTooFar:               http.StatusUnprocessableEntity,
	actor.CodeBufferConflict:       http.StatusUnprocessableEntity,
	actor.CodeHoldNotFound:         http.StatusNotFound,
	actor.CodeHoldExpired:          http.StatusConflict,
	actor.CodeHoldConfirmed:        http.StatusConflict,
	actor.CodeBookingNotConfirmed:  http.StatusConflict,
	actor.CodeCommandSkipped:       http.StatusConflict,
	actor.CodeNotStopped:           http.StatusConflict,
	actor.CodeCollectiveAborted:    http.StatusConflict,
	actor.CodeCollectivePending:    http.StatusConflict,
	actor.CodeCollectiveBooking:    http.StatusConflict,
	actor.CodePoolNotFound:         http.StatusNotFound,
	CodeNoCalendarFree:             http.StatusConflict,
	CodePayloadTooLarge:            http.StatusRequestEntityTooLarge,
	actor.CodeIdempotencyKeyReused: http.StatusUnprocessableEntity,
	CodeUnavailable:                http.StatusServiceUnavailable,
	CodeInternal:                   http.StatusInternalServerError,
	CodeUnauthorized:               http.StatusUnauthorized,
	CodeForbidden:                  http.StatusForbidden,
	CodeRateLimited:                http.StatusTooManyRequests,
	CodeRangeTooLarge:              http.StatusBadRequest,
	CodeBeyondBusyWindow:           http.StatusUnprocessableEntity,
	CodeNotEnabled:                 http.StatusNotFound,
}

// Error is an API error: a stable code, a message safe to show, and for
// some codes details or the conflicting interval.
type Error struct {
	Code     string             `json:"code"`
	Message  string             `json:"message"`
	Details  []actor.FieldError `json:"details,omitempty"`
	Conflict *Conflict          `json:"conflict,omitempty"`
	// Occurrences are a refused series': the occurrence that refused it,
	// or every occurrence when none was free (docs/api.md).
	Occurrences json.RawMessage `json:"occurrences,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Status is the HTTP status of the error's code (500 for an unknown code).
func (e *Error) Status() int {
	if s, ok := statusOf[e.Code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

type errorBody struct {
	Error *Error `json:"error"`
}

func invalid(details ...actor.FieldError) *Error {
	return &Error{Code: actor.CodeInvalidRequest, Message: "the request is invalid", Details: details}
}

// errorHandler turns any error a handler returns into the JSON error shape.
// Only internal errors are logged; their detail never reaches the client.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	var apiErr *Error
	var fe *fiber.Error
	switch {
	case errors.As(err, &apiErr):
	case errors.As(err, &fe):
		switch fe.Code {
		case fiber.StatusNotFound:
			apiErr = &Error{Code: CodeNotFound, Message: "no such route"}
		case fiber.StatusMethodNotAllowed:
			apiErr = &Error{Code: CodeMethodNotAllowed, Message: "method not allowed on this route"}
		case fiber.StatusRequestEntityTooLarge:
			apiErr = &Error{Code: CodePayloadTooLarge, Message: "request body too large"}
		case fiber.StatusBadRequest:
			apiErr = &Error{Code: actor.CodeInvalidRequest, Message: fe.Message}
		case fiber.StatusServiceUnavailable:
			apiErr = &Error{Code: CodeUnavailable, Message: "service unavailable, retry later"}
		case fiber.StatusRequestTimeout:
			apiErr = &Error{Code: CodeRequestTimeout, Message: "request not received in time"}
		case fiber.StatusRequestHeaderFieldsTooLarge:
			apiErr = &Error{Code: CodeHeadersTooLarge, Message: "request headers too large"}
		case fiber.StatusBadGateway:
			// Fiber's name for a broken client connection: nobody is
			// listening for this answer, and nothing is wrong inside.
			s.log.Debug("client connection error", "err", fe.Message)
			apiErr = &Error{Code: CodeInternal, Message: "connection error"}
		default:
			s.log.Error("http error", "request_id", requestIDOf(c), "path", c.Path(), "status", fe.Code, "err", fe.Message)
			apiErr = &Error{Code: CodeInternal, Message: "internal error"}
		}
	case isUnavailable(err):
		// A read racing the instance's shutdown (its index closed): the
		// client retries, here after the restart or on another instance.
		s.log.Debug("unavailable", "request_id", requestIDOf(c), "path", c.Path(), "err", err)
		apiErr = &Error{Code: CodeUnavailable, Message: "service unavailable, retry later"}
	default:
		s.log.Error("internal error", "request_id", requestIDOf(c), "method", c.Method(), "path", c.Path(), "err", err)
		apiErr = &Error{Code: CodeInternal, Message: "internal error"}
	}
	body, err := json.Marshal(errorBody{apiErr})
	if err != nil {
		return err
	}
	return sendJSON(c, apiErr.Status(), apiErr.Code, body)
}

// sendJSON writes an answer: every error body and every writer's reply goes
// out here, so the headers that belong to an error code are set whichever
// way the body was made (a scan of the reply, or encoding an Error).
func sendJSON(c *fiber.Ctx, status int, code string, body []byte) error {
	switch code {
	case CodeUnavailable:
		if c.GetRespHeader(fiber.HeaderRetryAfter) == "" {
			c.Set(fiber.HeaderRetryAfter, "1")
		}
	case CodeUnauthorized:
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="bookline"`)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(status).Send(body)
}

// Conflict is what a slot_taken or external_busy refusal says is in the
// way: its interval and, for a collective booking, the member calendar
// that refused and the booking there (when the index still has it).
type Conflict struct {
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	CalendarID string    `json:"calendar_id,omitempty"`
	BookingID  string    `json:"booking_id,omitempty"`
}
