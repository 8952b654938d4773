package data

import (
	"encoding/json"
	"time"
)

// Booking statuses.
const (
	StatusConfirmed = "confirmed"
	StatusCancelled = "cancelled"
)

// Calendar is a bookable calendar. Its id is also a NATS subject token, so it
// is restricted to [A-Za-z0-9_-]{1,64} (checked by the actor).
type Calendar struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Timezone  string    `json:"timezone"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Booking is a half-open interval [Start, End) on one calendar.
type Booking struct {
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

// Interval is a half-open time interval [Start, End).
type Interval struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Overlaps reports whether two half-open intervals share an instant.
// Touching intervals ([10,11) and [11,12)) do not overlap.
func (a Interval) Overlaps(b Interval) bool {
	return a.Start.Before(b.End) && b.Start.Before(a.End)
}

// RequestRecord is the decided outcome of one request id on one calendar.
// Fingerprint identifies the request body, so that a request id reused with a
// different body can be told apart from a retry. Reply is the actor's encoded
// answer, returned verbatim to every retry, forever.
type RequestRecord struct {
	Fingerprint string
	Seq         uint64
	Reply       json.RawMessage
}
