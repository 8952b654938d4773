// Package endpoint is the model of a webhook endpoint as the HTTP API and the
// delivery adapter (package webhook) both speak of it: its configuration,
// its delivery status, an admin's input and patch, the sample the metrics
// read, and the errors of a refused change.
//
// It imports the standard library only, so that the HTTP API can declare
// its webhook port without depending on NATS (the delivery adapter, a
// JetStream consumer, is wired to it in cmd/bookline).
package endpoint

import (
	"errors"
	"regexp"
	"time"
)

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

// Stat is what the metrics read of an endpoint.
type Stat struct {
	ID        string
	Enabled   bool
	Delivered uint64
	Failed    map[string]uint64
	// Lag is the events not yet delivered (consumer pending + ack
	// pending), -1 when unknown.
	Lag int64
}

var idPattern = regexp.MustCompile(`^wh_[0-9a-v]{16}$`)

// ValidID reports whether id can name an endpoint.
func ValidID(id string) bool { return idPattern.MatchString(id) }
