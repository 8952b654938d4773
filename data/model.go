package data

import (
	"encoding/json"
	"strconv"
	"time"
)

// Booking statuses. A hold is a booking record in status held until it is
// confirmed (same id), released or expired.
const (
	StatusConfirmed = "confirmed"
	StatusCancelled = "cancelled"
	StatusHeld      = "held"
	StatusReleased  = "released"
	StatusExpired   = "expired"
	// StatusPending is a collective booking's part between its prepare
	// and the collective's decision: it holds its interval, and only the
	// decision (commit or abort) changes it.
	StatusPending = "pending"
	// StatusAborted is a part whose collective was aborted, or a
	// collective's move record whose move was aborted.
	StatusAborted = "aborted"
	// StatusMoved is a collective's move record (MoveOf) whose move was
	// applied: its part holds the interval now, the record nothing.
	StatusMoved = "moved"
)

// Occupies reports whether a booking in this status holds its interval.
func Occupies(status string) bool {
	return status == StatusConfirmed || status == StatusHeld || status == StatusPending
}

// Calendar is a bookable calendar. Its id is also a NATS subject token, so it
// is restricted to [A-Za-z0-9_-]{1,64} (checked by the actor).
type Calendar struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Timezone string `json:"timezone"`
	Rules
	// Link links the calendar to an external calendar: bookings are
	// mirrored there and, with SyncBusy, its busy time blocks bookings.
	// Its wire and storage name "google" is kept from when Google was
	// the only provider: commands in existing streams and calendars in
	// existing indexes read the same (it is Google's form of a link; the
	// configured calendarsync provider serves every link).
	Link      *ExternalLink `json:"google,omitempty"`
	CreatedAt time.Time     `json:"created_at"`
	UpdatedAt time.Time     `json:"updated_at"`
}

// ExternalLink names the external calendar (a Google calendar, or one of
// another calendarsync provider) a bookline calendar is linked to.
// Credentials are never part of it: they are configured on the server.
type ExternalLink struct {
	// CalendarID is the external calendar's id (for Google an address, or
	// "primary" for the calendar of the configured credentials' user).
	CalendarID string `json:"calendar_id"`
	// SyncBusy imports the calendar's busy time as busy blocks.
	SyncBusy bool `json:"sync_busy,omitempty"`
	// EventTitle is the template of mirrored events' titles ({customer},
	// {calendar}, {booking}); empty means "Booked". Visibility is theirs:
	// "private" (when empty), "default", "public" or "confidential".
	// Neither changes any decision.
	EventTitle string `json:"event_title,omitempty"`
	Visibility string `json:"visibility,omitempty"`
	// CheckFreeBusy (with SyncBusy) has the provider's free/busy read before
	// each booking sent through the API, and what is busy enters the log
	// as busy blocks before the booking is decided (with Google it needs
	// the calendar.events.freebusy scope, --google-freebusy).
	CheckFreeBusy bool `json:"check_freebusy,omitempty"`
}

// Rules are a calendar's booking rules; the zero value accepts any
// interval. Times of day are in the calendar's time zone. They are checked
// by the partition's writer when it decides (actor/rules.go).
type Rules struct {
	// WeeklyHours lists the open intervals per weekday ("mon".."sun");
	// nil means open at all times, a weekday without entries is closed.
	WeeklyHours map[string][]TimeRange `json:"weekly_hours,omitempty"`
	// DateOverrides replace the weekly hours on single dates.
	DateOverrides []DateOverride `json:"date_overrides,omitempty"`
	// SlotStepMinutes: starts must fall on this grid in local time
	// (minutes since local midnight divisible by it).
	SlotStepMinutes         int   `json:"slot_step_minutes,omitempty"`
	MinDurationMinutes      int   `json:"min_duration_minutes,omitempty"`
	MaxDurationMinutes      int   `json:"max_duration_minutes,omitempty"`
	AllowedDurationsMinutes []int `json:"allowed_durations_minutes,omitempty"`
	// Buffers around each booking: buffered spans may not overlap (beyond
	// the capacity).
	BufferBeforeMinutes int `json:"buffer_before_minutes,omitempty"`
	BufferAfterMinutes  int `json:"buffer_after_minutes,omitempty"`
	// MinNoticeMinutes: no booking starting sooner than this after "now"
	// (the command's log time).
	MinNoticeMinutes int `json:"min_notice_minutes,omitempty"`
	// HorizonDays: no booking starting later than this many days after now.
	HorizonDays int `json:"horizon_days,omitempty"`
	// Capacity is the number of bookings that may overlap at any instant
	// (seats); 0 means 1.
	Capacity int `json:"capacity,omitempty"`
	// MaxHoldTTLSeconds bounds a hold's ttl; 0 means the default (1 h).
	MaxHoldTTLSeconds int `json:"max_hold_ttl_seconds,omitempty"`
}

// Seats is the effective capacity.
func (r *Rules) Seats() int { return max(r.Capacity, 1) }

// TimeRange is an interval of local wall-clock time "HH:MM"-"HH:MM"; end may
// be "24:00".
type TimeRange struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// DateOverride replaces the weekly hours on one local date (YYYY-MM-DD):
// closed all day, or open during Hours.
type DateOverride struct {
	Date   string      `json:"date"`
	Closed bool        `json:"closed,omitempty"`
	Hours  []TimeRange `json:"hours,omitempty"`
}

// Booking is a half-open interval [Start, End) on one calendar. Its codecs
// are two, each in one place: the binary forms here (AppendBooking,
// appendCompactBooking in stored.go) and the JSON of actor's reply codec
// (actor/replyjson.go), which every path that sends a booking uses. Both
// are written by hand for speed: a new field must be added to both, and
// tests that set every field by reflection (actor's replyfields_test.go,
// httpapi's TestReplyAnswerCarriesEveryField) fail until it is.
type Booking struct {
	ID          string     `json:"id"`
	CalendarID  string     `json:"calendar_id"`
	Start       time.Time  `json:"start"`
	End         time.Time  `json:"end"`
	Customer    string     `json:"customer"`
	Status      string     `json:"status"`
	CreatedAt   time.Time  `json:"created_at"`
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
	// ExpiresAt is set while the record is a hold (and kept when it
	// expires or is released).
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	Metadata  json.RawMessage `json:"metadata"`
	// SeriesID is the id of the recurring series the booking is an
	// occurrence of (BookingID of the series' calendar and request id;
	// no booking has it); empty for a booking on its own.
	SeriesID string `json:"series_id,omitempty"`
	// Series places an occurrence in its series (nil for a booking on its
	// own): with it the writer finds the occurrences that follow without
	// a scan (docs/protocol.md, "booking.cancel").
	Series *SeriesRef `json:"-"`
	// CalendarIDs are a collective booking's member calendars, in id
	// order, this one among them; nil for a booking of one calendar. A
	// collective's part has the collective's id on every member.
	CalendarIDs []string `json:"calendar_ids,omitempty"`
	// MoveID, on a collective's part, names the part's pending move: a
	// record of its own, in status pending at the new interval, from the
	// move's prepare until its decision reaches this calendar. Empty when
	// no move is pending.
	MoveID string `json:"move_id,omitempty"`
	// MoveOf, on a collective's move record, is the part it moves.
	MoveOf string `json:"move_of,omitempty"`
	// Buffers in force when the booking was made; they travel with it.
	BufferBefore time.Duration `json:"-"`
	BufferAfter  time.Duration `json:"-"`
}

// SeriesRef is what an occurrence keeps of its series: the request id
// that created the series, the occurrence's index (0 first) and the
// number of occurrences the series was expanded to (booked or skipped).
// Occurrence i's id is BookingID(calendar, OccurrenceRequestID(request, i)).
type SeriesRef struct {
	RequestID    string
	Index, Count int
}

// OccurrenceRequestID is the request id an occurrence's booking id is
// derived from: the series' request id, '/', the index. '/' is not a
// request id character, so no request of its own has it.
func OccurrenceRequestID(reqID string, i int) string { return reqID + "/" + strconv.Itoa(i) }

// Buffered is the booking's interval widened by its buffers.
func (b *Booking) Buffered() Interval {
	return Interval{Start: b.Start.Add(-b.BufferBefore), End: b.End.Add(b.BufferAfter)}
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

// BinaryReply is a decided command's answer, an actor.Reply, in one of the
// writer's binary encodings (actor.AppendReply for outbox entries,
// actor.AppendRecordReply for request records), not JSON: both are written
// inside the shared write transaction, where JSON costs too much (see
// codec.go). data stores it without reading it.
type BinaryReply []byte

// RequestRecord is the decided outcome of one request id on one calendar.
// Fingerprint identifies the request body, so that a request id reused with a
// different body can be told apart from a retry. The actor rebuilds its
// answer from the record, the same for every retry, forever: from Reply,
// or, for the creation of a booking, from Created.
type RequestRecord struct {
	// Calendar and RequestID are the record's key (filled in by reads).
	Calendar, RequestID string
	Fingerprint         string // 32 hexadecimal digits (16 bytes)
	Seq                 uint64
	// Reply is the actor's compact form of the answer; nil for a
	// creation.
	Reply BinaryReply
	// Created, for the record of a booking's (or hold's) creation, is the
	// booking as it was created; V and Kind are the reply's schema
	// version and command type as the actor codes them.
	Created *Booking
	V, Kind uint8
	// Expires is the log time at which the record is dropped; zero: kept
	// forever. See Tx.PutExpiringRequest.
	Expires time.Time
}
