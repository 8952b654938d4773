package actor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/bookline/bookline/data"
)

// Fingerprint identifies what a command asks for, independent of its request
// id and of JSON formatting. A request id seen again with the same
// fingerprint is a retry; with another fingerprint it is a reused key.
// Call it on a validated (normalised) command.
func (c *Command) Fingerprint() string {
	// The hashed bytes are json.Marshal of the body below; for commands
	// without calendar or busy body they are appended by hand, identically
	// and without reflection (see appendFingerprintBody).
	var buf [512]byte
	b, ok := appendFingerprintBody(buf[:0], c)
	switch {
	case c.Type == TypePartitionSkip:
		b, _ = json.Marshal(fpSkipV2{Type: c.Type, CalendarID: c.CalendarID, Skip: c.Skip})
	case !ok:
		b = c.fingerprintJSON()
	}
	if ext := c.seriesFingerprint(); ext != nil {
		// Right after the version 1 body, a complete JSON object: the
		// two cannot be read otherwise.
		b = append(b, ext...)
	}
	if ext := c.v4Fingerprint(); ext != nil {
		b = append(b, ext...)
	}
	if ext := c.v5Fingerprint(); ext != nil {
		b = append(b, ext...)
	}
	if ext := c.commitsFingerprint(); ext != nil {
		b = append(b, ext...)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// fingerprintJSON is the body Fingerprint hashes, as json.Marshal writes it
// (nil if Marshal fails, e.g. for a year after 9999: the hash of nothing).
func (c *Command) fingerprintJSON() []byte {
	b, _ := json.Marshal(fingerprintBodyV1(c))
	return b
}

// The fingerprint of a schema 1 command covers exactly the fields below,
// encoded as json.Marshal writes them. They are copies of the command types
// as schema 1 defined them, not those types: a field that a later build adds
// to Command, CalendarSpec, BookingSpec, data.Rules and so on under the
// same v is informational (a field a writer must not ignore comes with a
// new v), and it must not change the fingerprint, or builds of different
// ages would disagree on whether a request id seen again is a retry (the
// recorded answer on one instance, idempotency_key_reused on another).
// Never change these types; a new schema version defines its own body.

type fpV1 struct {
	Type       string        `json:"type"`
	CalendarID string        `json:"calendar_id"`
	Calendar   *fpCalendarV1 `json:"calendar,omitempty"`
	Booking    *fpBookingV1  `json:"booking,omitempty"`
	BookingID  string        `json:"booking_id,omitempty"`
	Reschedule *fpIntervalV1 `json:"reschedule,omitempty"`
	Busy       *fpBusyV1     `json:"busy,omitempty"`
}

type fpCalendarV1 struct {
	Name                    string                     `json:"name"`
	Timezone                string                     `json:"timezone"`
	WeeklyHours             map[string][]fpTimeRangeV1 `json:"weekly_hours,omitempty"`
	DateOverrides           []fpDateOverrideV1         `json:"date_overrides,omitempty"`
	SlotStepMinutes         int                        `json:"slot_step_minutes,omitempty"`
	MinDurationMinutes      int                        `json:"min_duration_minutes,omitempty"`
	MaxDurationMinutes      int                        `json:"max_duration_minutes,omitempty"`
	AllowedDurationsMinutes []int                      `json:"allowed_durations_minutes,omitempty"`
	BufferBeforeMinutes     int                        `json:"buffer_before_minutes,omitempty"`
	BufferAfterMinutes      int                        `json:"buffer_after_minutes,omitempty"`
	MinNoticeMinutes        int                        `json:"min_notice_minutes,omitempty"`
	HorizonDays             int                        `json:"horizon_days,omitempty"`
	Capacity                int                        `json:"capacity,omitempty"`
	MaxHoldTTLSeconds       int                        `json:"max_hold_ttl_seconds,omitempty"`
	Link                    *fpLinkV1                  `json:"google,omitempty"`
}

type fpTimeRangeV1 struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

type fpDateOverrideV1 struct {
	Date   string          `json:"date"`
	Closed bool            `json:"closed,omitempty"`
	Hours  []fpTimeRangeV1 `json:"hours,omitempty"`
}

type fpLinkV1 struct {
	CalendarID string `json:"calendar_id"`
	SyncBusy   bool   `json:"sync_busy,omitempty"`
}

type fpBookingV1 struct {
	Start      time.Time       `json:"start"`
	End        time.Time       `json:"end"`
	Customer   string          `json:"customer"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
	TTLSeconds int             `json:"ttl_seconds,omitempty"`
}

type fpIntervalV1 struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

type fpBusyV1 struct {
	BlockID string    `json:"block_id"`
	Start   time.Time `json:"start,omitzero"`
	End     time.Time `json:"end,omitzero"`
}

// fpSkipV2 is the fingerprint body of partition.skip (schema version 2):
// a skip of another command is another request.
type fpSkipV2 struct {
	Type       string    `json:"type"`
	CalendarID string    `json:"calendar_id"`
	Skip       *SkipSpec `json:"skip"`
}

// fingerprintBodyV1 copies the schema 1 fields of c.
func fingerprintBodyV1(c *Command) fpV1 {
	f := fpV1{Type: c.Type, CalendarID: c.CalendarID, BookingID: c.BookingID}
	if s := c.Calendar; s != nil {
		r := &s.Rules
		f.Calendar = &fpCalendarV1{Name: s.Name, Timezone: s.Timezone,
			SlotStepMinutes: r.SlotStepMinutes, MinDurationMinutes: r.MinDurationMinutes, MaxDurationMinutes: r.MaxDurationMinutes,
			AllowedDurationsMinutes: r.AllowedDurationsMinutes, BufferBeforeMinutes: r.BufferBeforeMinutes,
			BufferAfterMinutes: r.BufferAfterMinutes, MinNoticeMinutes: r.MinNoticeMinutes, HorizonDays: r.HorizonDays,
			Capacity: r.Capacity, MaxHoldTTLSeconds: r.MaxHoldTTLSeconds}
		if r.WeeklyHours != nil {
			f.Calendar.WeeklyHours = make(map[string][]fpTimeRangeV1, len(r.WeeklyHours))
			for day, rs := range r.WeeklyHours { // a map: encoded with sorted keys
				f.Calendar.WeeklyHours[day] = fpRangesV1(rs)
			}
		}
		if r.DateOverrides != nil {
			f.Calendar.DateOverrides = make([]fpDateOverrideV1, len(r.DateOverrides))
			for i, o := range r.DateOverrides {
				f.Calendar.DateOverrides[i] = fpDateOverrideV1{Date: o.Date, Closed: o.Closed, Hours: fpRangesV1(o.Hours)}
			}
		}
		if g := s.Link; g != nil {
			f.Calendar.Link = &fpLinkV1{CalendarID: g.CalendarID, SyncBusy: g.SyncBusy}
		}
	}
	if b := c.Booking; b != nil {
		f.Booking = &fpBookingV1{Start: b.Start, End: b.End, Customer: b.Customer, Metadata: b.Metadata, TTLSeconds: b.TTLSeconds}
	}
	if iv := c.Reschedule; iv != nil {
		f.Reschedule = &fpIntervalV1{Start: iv.Start, End: iv.End}
	}
	if b := c.Busy; b != nil {
		f.Busy = &fpBusyV1{BlockID: b.BlockID, Start: b.Start, End: b.End}
	}
	return f
}

// fpRangesV1 copies time ranges, keeping nil apart from empty (null and []
// encode differently).
func fpRangesV1(rs []data.TimeRange) []fpTimeRangeV1 {
	if rs == nil {
		return nil
	}
	out := make([]fpTimeRangeV1, len(rs))
	for i, r := range rs {
		out[i] = fpTimeRangeV1{Start: r.Start, End: r.End}
	}
	return out
}
