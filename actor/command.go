package actor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/data"
)

// SchemaVersion is the command and reply schema version this build writes:
// bookline's producers write version 1 for every command version 1 can
// express, so that every build still running can decide it (docs/protocol.md
// "Versions"), and replies are version 1. The versions this build can decide
// go up to KnownSchemaVersion.
const SchemaVersion = 1

// Command types.
const (
	TypeCalendarUpsert = "calendar.upsert"
	TypeBookingCreate  = "booking.create"
	TypeBookingCancel  = "booking.cancel"
	// TypeBookingReschedule moves a confirmed booking (booking_id,
	// reschedule) atomically: refused, the old interval stays.
	TypeBookingReschedule = "booking.reschedule"
	// TypeHoldCreate reserves an interval for ttl_seconds (booking body).
	TypeHoldCreate = "hold.create"
	// TypeHoldConfirm turns a live hold (booking_id) into a booking.
	TypeHoldConfirm = "hold.confirm"
	// TypeHoldRelease releases a hold (booking_id).
	TypeHoldRelease = "hold.release"
	// TypeHoldExpire records the expiry of the calendar's due holds.
	TypeHoldExpire = "hold.expire"
	// TypeBusySet records (or moves) an external busy block (busy): no
	// booking may overlap it. Published by calendarsync from the
	// linked external calendar (the busy source).
	TypeBusySet = "busy.set"
	// TypeBusyClear removes an external busy block (busy.block_id).
	TypeBusyClear = "busy.clear"
)

// Command types of schema version 2 (a version 1 command of these types is
// of an unknown type). Both are published to a partition's system token
// (queue.SystemToken), not to a calendar.
const (
	// TypeSchemaUpgrade changes nothing but the partition's rules level:
	// deciding it, as any version 2 command, raises the level to 2.
	TypeSchemaUpgrade = "schema.upgrade"
	// TypePartitionSkip is an operator's way past a command that stopped
	// its partition (skip.seq): see docs/protocol.md, "Versions".
	TypePartitionSkip = "partition.skip"
)

// Limits checked for every command, whether it came through HTTP or was
// published straight to NATS by an importer.
const (
	MaxCommandBytes    = 64 << 10
	MaxCustomerLen     = 200
	MaxNameLen         = 200
	MaxMetadataBytes   = 16 << 10
	MaxBookingDuration = 7 * 24 * time.Hour
	MinYear            = 1970
	MaxYear            = 2199
	// MaxRecordTTLSeconds bounds record_ttl_seconds (about 10 years):
	// longer is what 0, forever, is for.
	MaxRecordTTLSeconds = 10 * 366 * 24 * 3600
)

// Limits of external calendar links and busy blocks.
const (
	MaxExternalCalendarIDLen = 1024
	MaxBusyDuration          = 366 * 24 * time.Hour
)

// The id checks below are byte loops equal to the regular expressions in
// their comments (every class is ASCII, so bytes and runes agree); Validate
// runs two or three of them per command and regexp was a tenth of Decode.

// ValidBlockID reports whether id is a valid busy block id:
// ^[A-Za-z0-9._:-]{1,128}$.
func ValidBlockID(id string) bool { return validIDBytes(id, 128, isRequestIDByte) }

// ValidCalendarID reports whether id is a valid calendar id (also a safe
// NATS subject token): ^[A-Za-z0-9_-]{1,64}$.
func ValidCalendarID(id string) bool {
	return validIDBytes(id, 64, func(b byte) bool { return isAlnum(b) || b == '_' || b == '-' })
}

// ValidRequestID reports whether id is a valid request id:
// ^[A-Za-z0-9._:-]{1,128}$.
func ValidRequestID(id string) bool { return validIDBytes(id, 128, isRequestIDByte) }

// ValidBookingID reports whether id has the shape of a booking id:
// ^[0-9a-v]{26}$.
func ValidBookingID(id string) bool {
	return len(id) == 26 && validIDBytes(id, 26, func(b byte) bool { return '0' <= b && b <= '9' || 'a' <= b && b <= 'v' })
}

func isRequestIDByte(b byte) bool {
	return isAlnum(b) || b == '.' || b == '_' || b == ':' || b == '-'
}

// Command is one entry of the command log, as published on
// bookline.cmd.<calendar_id>. See docs/protocol.md.
type Command struct {
	V          int           `json:"v"`
	Type       string        `json:"type"`
	RequestID  string        `json:"request_id"`
	CalendarID string        `json:"calendar_id"`
	Calendar   *CalendarSpec `json:"calendar,omitempty"`
	Booking    *BookingSpec  `json:"booking,omitempty"`
	BookingID  string        `json:"booking_id,omitempty"`
	Reschedule *IntervalSpec `json:"reschedule,omitempty"`
	Busy       *BusySpec     `json:"busy,omitempty"`
	// RecordTTLSeconds is how long the request record is kept, in log
	// time from the command's own stream timestamp; 0 (absent) keeps it
	// forever. The publisher chooses it, and the log carries it, so every
	// writer and every replay drop the record at the same point of the
	// log. It is not part of the fingerprint: a retry is the same request
	// whatever retention it asks for.
	RecordTTLSeconds int `json:"record_ttl_seconds,omitempty"`
	// Skip is the body of partition.skip (schema version 2).
	Skip *SkipSpec `json:"skip,omitempty"`
	// Scope following makes a booking.cancel cancel the occurrences of
	// the booking's series from it on (schema version 3: series.go).
	Scope LenientString `json:"scope,omitempty"`
	// Collective is the body of the collective.* commands (schema
	// version 4: collective.go).
	Collective *CollectiveSpec `json:"collective,omitempty"`
	// Pool is the body of the pool.* commands (schema version 4: pool.go).
	Pool *PoolSpec `json:"pool,omitempty"`
	// Move is the body of the collective.move* commands (schema version
	// 5: collective_move.go).
	Move *MoveSpec `json:"move,omitempty"`
	// Commits is the body of collective.commits (schema version 5:
	// collective_commits.go).
	Commits *CommitsSpec `json:"commits,omitempty"`
}

// SkipSpec is the body of partition.skip: the stream sequence of the
// command to skip.
type SkipSpec struct {
	Seq uint64 `json:"seq"`
	// bad is set when the member was not an object with a seq of a JSON
	// unsigned integer.
	bad bool
}

// UnmarshalJSON reads the body of partition.skip and never fails: a
// version 1 command that carries a member named skip (which version 1 did
// not define, so its decoder ignored it) must be decided as before, and a
// partition.skip whose skip is not what it should be is refused by
// Validate with the field named.
func (s *SkipSpec) UnmarshalJSON(b []byte) error {
	var v struct {
		Seq *uint64 `json:"seq"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Seq == nil {
		*s = SkipSpec{bad: true}
		return nil
	}
	*s = SkipSpec{Seq: *v.Seq}
	return nil
}

// RecordTTLSeconds turns a record retention into record_ttl_seconds:
// whole seconds, rounded up, at most MaxRecordTTLSeconds; 0 (or less)
// keeps records forever.
func RecordTTLSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int(min((d+time.Second-1)/time.Second, MaxRecordTTLSeconds))
}

// BusySpec is the body of busy.set (all fields) and busy.clear (block_id).
type BusySpec struct {
	BlockID string    `json:"block_id"`
	Start   time.Time `json:"start,omitzero"`
	End     time.Time `json:"end,omitzero"`
}

// CalendarSpec is the body of calendar.upsert: name, time zone and the
// booking rules (flat, as in the HTTP body).
type CalendarSpec struct {
	Name     string `json:"name"`
	Timezone string `json:"timezone"`
	data.Rules
	// Link links the calendar to an external calendar (optional). The
	// wire name "google" is the command's since v1 and stays.
	Link *data.ExternalLink `json:"google,omitempty"`
}

// IntervalSpec is the new interval of booking.reschedule.
type IntervalSpec struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// BookingSpec is the body of booking.create.
type BookingSpec struct {
	Start    time.Time       `json:"start"`
	End      time.Time       `json:"end"`
	Customer string          `json:"customer"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// TTLSeconds is the lifetime of a hold (hold.create only; default 300).
	TTLSeconds int `json:"ttl_seconds,omitempty"`
	// Recurrence makes the booking a series, and OnConflict says what a
	// refused occurrence does to it (schema version 3: series.go).
	Recurrence *RecurrenceSpec `json:"recurrence,omitempty"`
	OnConflict LenientString   `json:"on_conflict,omitempty"`
}

// FieldError names one invalid field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// BookingID derives the id of the booking created by request reqID on calID:
// 26 characters of base32hex (lowercase), which is also a valid
// client-chosen event id of an external calendar (Google's base32hex).
// The index finds a creation's request record from it (data.BookingID).
func BookingID(calID, reqID string) string { return data.BookingID(calID, reqID) }

// CanonicalMetadata validates booking metadata (absent, null or a JSON
// object) and returns it in canonical form: compact, keys sorted, numbers
// kept as written. Two semantically equal objects give equal bytes.
func CanonicalMetadata(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return json.RawMessage("{}"), nil
	}
	if len(raw) > MaxMetadataBytes {
		return nil, fmt.Errorf("must be at most %d bytes", MaxMetadataBytes)
	}
	if isCanonicalObject(raw) {
		// Already what the round trip below would produce (the usual case:
		// httpapi and the writer itself store canonical metadata). A copy,
		// so the result never aliases the caller's bytes.
		return append(json.RawMessage(nil), raw...), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, fmt.Errorf("must be a JSON object")
	}
	if trailingData(raw, dec) {
		return nil, fmt.Errorf("must be a single JSON object")
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("must be a JSON object")
	}
	return out, nil
}

// ValidateBooking checks a booking body under the strict rules and returns
// one entry per invalid field; nil means valid. It also puts the times in
// UTC and the metadata in canonical form.
func ValidateBooking(b *BookingSpec) []FieldError { return validateBooking(b, true) }

// validateBooking is ValidateBooking, under the strict rules or those of
// rules level 1.
func validateBooking(b *BookingSpec, strict bool) []FieldError {
	errs := validateInterval(&b.Start, &b.End, strict)
	add := func(f, m string) { errs = append(errs, FieldError{Field: f, Message: m}) }
	switch n := utf8.RuneCountInString(b.Customer); {
	case n == 0 || strict && blank(b.Customer):
		add("customer", "is required")
	case n > MaxCustomerLen:
		add("customer", fmt.Sprintf("must be at most %d characters", MaxCustomerLen))
	case !utf8.ValidString(b.Customer):
		add("customer", "must be valid UTF-8")
	}
	if md, err := CanonicalMetadata(b.Metadata); err != nil {
		add("metadata", err.Error())
	} else {
		if strict && !bytes.Equal(md, bytes.TrimSpace(b.Metadata)) {
			// Not canonical as sent: the round trip may have
			// dropped a duplicate key or replaced invalid UTF-8.
			if sc := scanStrictOpaque(b.Metadata); sc.ok && sc.violation != "" {
				add("metadata", "must be valid strict JSON: "+sc.violation)
				return errs
			}
		}
		b.Metadata = md
	}
	return errs
}

// TimeRangeMessage is what the strict rules say of a time that is missing
// or outside years MinYear..MaxYear: the same for both, and for start and
// end (a year 0001 time and a missing one are both Go's zero time).
var TimeRangeMessage = fmt.Sprintf("must be an RFC 3339 time between years %d and %d, e.g. 2026-12-01T10:00:00Z", MinYear, MaxYear)

// validateInterval checks start and end of a booking interval and puts them
// in UTC.
func validateInterval(start, end *time.Time, strict bool) []FieldError {
	var errs []FieldError
	add := func(f, m string) { errs = append(errs, FieldError{Field: f, Message: m}) }
	okTime := func(field string, t time.Time) bool {
		switch {
		case strict && (t.IsZero() || t.Year() < MinYear || t.Year() > MaxYear):
			add(field, TimeRangeMessage)
		case t.IsZero():
			add(field, "is required (RFC 3339, e.g. 2026-12-01T10:00:00Z)")
		case t.Year() < MinYear || t.Year() > MaxYear:
			add(field, fmt.Sprintf("must be between years %d and %d", MinYear, MaxYear))
		default:
			return true
		}
		return false
	}
	okStart, okEnd := okTime("start", *start), okTime("end", *end)
	if okStart && okEnd {
		switch d := end.Sub(*start); {
		case d <= 0:
			add("end", "must be after start")
		case d > MaxBookingDuration:
			add("end", fmt.Sprintf("booking may last at most %s", MaxBookingDuration))
		}
	}
	*start, *end = start.UTC(), end.UTC()
	return errs
}

// ValidateCalendar checks a calendar body; an empty timezone means UTC.
func ValidateCalendar(c *CalendarSpec) []FieldError {
	var errs []FieldError
	if c.Timezone == "" {
		c.Timezone = "UTC"
	}
	if _, err := zones.Load(c.Timezone); err != nil {
		errs = append(errs, FieldError{Field: "timezone", Message: "must be an IANA time zone name, e.g. Europe/Berlin"})
	}
	if n := utf8.RuneCountInString(c.Name); n > MaxNameLen || !utf8.ValidString(c.Name) {
		errs = append(errs, FieldError{Field: "name", Message: fmt.Sprintf("must be valid UTF-8, at most %d characters", MaxNameLen)})
	}
	if g := c.Link; g != nil {
		switch id := strings.TrimSpace(g.CalendarID); {
		case id == "":
			errs = append(errs, FieldError{Field: "google.calendar_id", Message: "is required"})
		case len(id) > MaxExternalCalendarIDLen || !utf8.ValidString(id) || strings.ContainsAny(id, "/?#\x00"):
			errs = append(errs, FieldError{Field: "google.calendar_id", Message: fmt.Sprintf("must be a Google calendar id (at most %d bytes, no '/', '?' or '#')", MaxExternalCalendarIDLen)})
		default:
			g.CalendarID = id
		}
	}
	return append(errs, ValidateRules(&c.Rules)...)
}

// Validate checks the envelope and body of a command under the strict rules
// (what the HTTP API and bookline's producers send). It normalises the body
// in place (UTC times, canonical metadata, default timezone).
func (c *Command) Validate() []FieldError { return c.validate(true) }

// validate is Validate under the strict rules or those of rules level 1
// (docs/protocol.md, "Versions").
//
// long: one case per command type and one check per schema version's
// members, in one place, so that what a version accepts reads as a whole.
func (c *Command) validate(strict bool) []FieldError {
	var errs []FieldError
	add := func(f, m string) { errs = append(errs, FieldError{Field: f, Message: m}) }
	if !ValidCalendarID(c.CalendarID) {
		add("calendar_id", "must match [A-Za-z0-9_-]{1,64}")
	}
	if !ValidRequestID(c.RequestID) {
		add("request_id", "must match [A-Za-z0-9._:-]{1,128}")
	}
	switch c.Type {
	case TypeCalendarUpsert:
		if c.Calendar == nil {
			add("calendar", "is required")
		} else {
			errs = append(errs, ValidateCalendar(c.Calendar)...)
		}
	case TypeBookingCreate, TypeHoldCreate:
		if c.Booking == nil {
			add("booking", "is required")
		} else {
			errs = append(errs, validateBooking(c.Booking, strict)...)
			if c.Booking.TTLSeconds < 0 || c.Booking.TTLSeconds > int(MaxHoldTTL/time.Second) {
				add("ttl", fmt.Sprintf("must be from 1 to %d seconds", int(MaxHoldTTL/time.Second)))
			} else if c.Type == TypeBookingCreate && c.Booking.TTLSeconds != 0 {
				add("ttl", "only holds have a ttl")
			}
		}
	case TypeBookingCancel, TypeHoldConfirm, TypeHoldRelease:
		if !ValidBookingID(c.BookingID) {
			add("booking_id", "is not a booking id")
		}
	case TypeBookingReschedule:
		if !ValidBookingID(c.BookingID) {
			add("booking_id", "is not a booking id")
		}
		if c.Reschedule == nil {
			add("reschedule", "is required")
		} else {
			errs = append(errs, validateInterval(&c.Reschedule.Start, &c.Reschedule.End, strict)...)
		}
	case TypeHoldExpire:
	case TypeBusySet, TypeBusyClear:
		switch {
		case c.Busy == nil:
			add("busy", "is required")
		case !ValidBlockID(c.Busy.BlockID):
			add("busy.block_id", "must match [A-Za-z0-9._:-]{1,128}")
		case c.Type == TypeBusySet:
			for _, e := range validateInterval(&c.Busy.Start, &c.Busy.End, strict) {
				if d := c.Busy.End.Sub(c.Busy.Start); e.Field == "end" && d > MaxBookingDuration {
					if d <= MaxBusyDuration {
						continue // busy blocks may be longer than bookings
					}
					e.Message = fmt.Sprintf("a busy block may last at most %s", MaxBusyDuration)
				}
				add("busy."+e.Field, e.Message)
			}
		default:
			c.Busy.Start, c.Busy.End = time.Time{}, time.Time{}
		}
	case TypeCollectivePrepare, TypeCollectiveAbort, TypeCollectiveFence, TypeCollectiveDecide, TypeCollectiveCommit,
		TypeCollectiveCancel, TypePoolUpsert, TypePoolChoose, TypePoolRecord:
		errs = append(errs, c.validateStepType(strict)...)
	case TypeCollectiveMove, TypeCollectiveMoveCommit, TypeCollectiveMoveAbort, TypeCollectiveCommits:
		if c.V < CollectiveMoveSchemaVersion { // = CollectiveVotesSchemaVersion: both are version 5's
			add("type", fmt.Sprintf("unknown command type %q", c.Type))
		}
	case TypeSchemaUpgrade, TypePartitionSkip:
		switch {
		case c.V < 2:
			add("type", fmt.Sprintf("unknown command type %q", c.Type))
		case c.Type == TypePartitionSkip && (c.Skip == nil || c.Skip.bad || c.Skip.Seq == 0):
			add("skip.seq", "must be the stream sequence (a positive integer) of the command to skip")
		}
	default:
		add("type", fmt.Sprintf("unknown command type %q", c.Type))
	}
	if c.V < SeriesSchemaVersion {
		c.dropSeriesFields()
	} else {
		errs = append(errs, c.validateSeries()...)
	}
	if c.V < CollectiveSchemaVersion {
		c.dropCollectiveFields()
	} else {
		errs = append(errs, c.validateCollective()...)
		errs = append(errs, c.validatePool()...)
	}
	errs = append(errs, c.validateMove(strict)...)
	if c.V < CollectiveVotesSchemaVersion {
		c.Commits = nil
	} else {
		errs = append(errs, c.validateCommits()...)
	}
	if c.RecordTTLSeconds < 0 || c.RecordTTLSeconds > MaxRecordTTLSeconds {
		add("record_ttl_seconds", fmt.Sprintf("must be from 0 (keep the record forever) to %d seconds", MaxRecordTTLSeconds))
	}
	return errs
}

// trailingData reports whether anything but JSON white space follows the
// value dec has just decoded from data. (Decoder.More is not enough: it
// reports false for a stray '}' or ']' after the value.)
func trailingData(data []byte, dec *json.Decoder) bool {
	rest := data[dec.InputOffset():]
	return len(bytes.TrimLeft(rest, " \t\r\n")) > 0
}
