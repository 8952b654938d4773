package webhook

import (
	"encoding/json"
	"errors"
	"slices"
	"time"
)

// Webhook event types, derived from an outcome event's command type and
// outcome (see EventType).
const (
	EventCalendarCreated    = "calendar.created"
	EventCalendarUpdated    = "calendar.updated"
	EventBookingConfirmed   = "booking.confirmed"
	EventBookingCancelled   = "booking.cancelled"
	EventBookingRescheduled = "booking.rescheduled"
	EventHoldCreated        = "hold.created"
	EventHoldReleased       = "hold.released"
	EventHoldExpired        = "hold.expired"
	EventBusySet            = "busy.set"
	EventBusyCleared        = "busy.cleared"
	EventCommandRejected    = "command.rejected"
	// EventCommandAccepted is an accepted command of a type this build does
	// not map (a newer writer's).
	EventCommandAccepted = "command.accepted"
)

// EventTypes are the types an endpoint may subscribe to.
var EventTypes = []string{
	EventCalendarCreated, EventCalendarUpdated, EventBookingConfirmed, EventBookingCancelled,
	EventBookingRescheduled, EventHoldCreated, EventHoldReleased, EventHoldExpired,
	EventBusySet, EventBusyCleared, EventCommandRejected, EventCommandAccepted,
}

// outcome is what EventType reads of an outcome event's payload.
type outcome struct {
	Type    string `json:"type"`
	Outcome string `json:"outcome"`
	Created bool   `json:"created"`
}

// EventType maps an outcome event (docs/protocol.md §7) to its webhook
// type. A confirmed hold becomes booking.confirmed, like a direct booking:
// from then on it is one (the payload's type, hold.confirm, tells them
// apart).
func EventType(payload []byte) string {
	var o outcome
	if err := json.Unmarshal(payload, &o); err != nil {
		return EventCommandRejected
	}
	if o.Outcome != "accepted" {
		return EventCommandRejected
	}
	switch o.Type {
	case "calendar.upsert":
		if o.Created {
			return EventCalendarCreated
		}
		return EventCalendarUpdated
	case "booking.create", "hold.confirm":
		return EventBookingConfirmed
	case "booking.cancel":
		return EventBookingCancelled
	case "booking.reschedule":
		return EventBookingRescheduled
	case "hold.create":
		return EventHoldCreated
	case "hold.release":
		return EventHoldReleased
	case "hold.expire":
		return EventHoldExpired
	case "busy.set":
		return EventBusySet
	case "busy.clear":
		return EventBusyCleared
	}
	return EventCommandAccepted
}

// Endpoint is one webhook endpoint as stored in the KV bucket.
type Endpoint struct {
	ID  string `json:"id"`
	URL string `json:"url"`
	// Events are the webhook types delivered; empty = all.
	Events []string `json:"events"`
	// Calendars limits deliveries to these calendars; empty = all.
	Calendars   []string `json:"calendars"`
	Description string   `json:"description"`
	Enabled     bool     `json:"enabled"`
	// DisabledReason says why bookline disabled the endpoint (empty when
	// it is enabled or an admin disabled it).
	DisabledReason string     `json:"disabled_reason,omitempty"`
	DisabledAt     *time.Time `json:"disabled_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`

	// Secrets sign deliveries, newest first; an older one signs until it
	// expires (a rotation's grace period).
	Secrets []Secret `json:"secrets"`
	// Generation numbers the endpoint's consumer: a replay starts a new one
	// (a new durable consumer from the replay's time).
	Generation int `json:"generation"`
	// StartSeq is where generation 0 starts in the event stream: the
	// first event stored after the endpoint was created.
	StartSeq uint64 `json:"start_seq,omitempty"`
	// ReplayFrom is where the current generation starts, when it came
	// from a replay.
	ReplayFrom *time.Time `json:"replay_from,omitempty"`
}

// Secret is one signing secret.
type Secret struct {
	Value     string     `json:"value"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// signing is the secrets that sign at now, newest first.
func (e *Endpoint) signing(now time.Time) []string {
	var out []string
	for _, s := range e.Secrets {
		if s.ExpiresAt == nil || now.Before(*s.ExpiresAt) {
			out = append(out, s.Value)
		}
	}
	return out
}

// wants reports whether the endpoint subscribes to webhook type typ.
func (e *Endpoint) wants(typ string) bool {
	return len(e.Events) == 0 || slices.Contains(e.Events, typ)
}

// Attempt is one delivery attempt, as GET /v1/webhooks/{id} shows it.
type Attempt struct {
	At        time.Time `json:"at"`
	EventID   string    `json:"event_id"`
	EventType string    `json:"event_type"`
	Attempt   int       `json:"attempt"`
	// Status is the HTTP status answered (0 when none was).
	Status     int    `json:"status,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	OK         bool   `json:"ok"`
}

// MaxAttemptsShown is how many recent attempts a status keeps.
const MaxAttemptsShown = 10

// Status is the delivery state of an endpoint, written by the instance
// that delivers to it.
type Status struct {
	LastSuccess *time.Time `json:"last_success,omitempty"`
	// FailingEvent is the event being retried ("" when none is), with the
	// attempts made so far and when the first of them failed: a restart
	// carries on with the schedule rather than starting it again.
	FailingEvent string     `json:"failing_event,omitempty"`
	Failures     int        `json:"failures,omitempty"`
	FailingSince *time.Time `json:"failing_since,omitempty"`
	NextAttempt  *time.Time `json:"next_attempt,omitempty"`
	// Attempts are the latest attempts, newest first.
	Attempts []Attempt `json:"attempts"`
}

// Input is what an admin gives to create an endpoint.
type Input struct {
	URL         string
	Events      []string
	Calendars   []string
	Description string
	Enabled     *bool // nil = true
}

// Patch changes some fields of an endpoint (nil = unchanged).
type Patch struct {
	URL         *string
	Events      *[]string
	Calendars   *[]string
	Description *string
	Enabled     *bool
}

// FieldError is a refused field of an Input or Patch.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// ErrNotFound is returned for an unknown endpoint id.
var ErrNotFound = errors.New("webhook: endpoint not found")
