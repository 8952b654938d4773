package actor

// The implementation of Decode, Validate, CanonicalMetadata, Fingerprint and
// the id checks as they were before the fast paths (commit b092d49), kept
// verbatim under other names. Request records store fingerprints and
// rejection messages, and a replay of an old stream must reproduce them byte
// for byte, so the differential tests (fastpath_test.go) hold the fast code
// to exactly these results. Do not "improve" this file: it is the contract.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"
)

var (
	refCalendarIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	refRequestIDRe  = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	refBookingIDRe  = regexp.MustCompile(`^[0-9a-v]{26}$`)
	refBlockIDRe    = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
)

func decodeReference(in Input) Decoded {
	d := Decoded{Seq: in.Seq, At: in.At.UTC(), msg: in}
	reject := func(code, msg string, details []FieldError) Decoded {
		d.Reject = &Reply{V: SchemaVersion, RequestID: d.Cmd.RequestID, CalendarID: in.SubjectCalendar,
			Type: d.Cmd.Type, Outcome: OutcomeRejected, Code: code, Message: msg, Details: details, Seq: in.Seq}
		return d
	}
	if len(in.Data) > MaxCommandBytes {
		return reject(CodeInvalidCommand, fmt.Sprintf("command larger than %d bytes", MaxCommandBytes), nil)
	}
	dec := json.NewDecoder(bytes.NewReader(in.Data))
	if err := dec.Decode(&d.Cmd); err != nil {
		d.Cmd = Command{}
		return reject(CodeInvalidCommand, "command is not valid JSON for the schema: "+err.Error(), nil)
	}
	if trailingData(in.Data, dec) {
		return reject(CodeInvalidCommand, "trailing data after the command", nil)
	}
	if d.Cmd.V < 1 || d.Cmd.V > SchemaVersion {
		return reject(CodeInvalidCommand, fmt.Sprintf("unsupported schema version %d (this writer knows 1..%d)", d.Cmd.V, SchemaVersion), nil)
	}
	if d.Cmd.CalendarID != in.SubjectCalendar {
		return reject(CodeInvalidCommand, "calendar_id does not match the subject", nil)
	}
	if errs := validateReference(&d.Cmd); len(errs) > 0 {
		code := CodeInvalidRequest
		for _, e := range errs {
			if e.Field == "type" || e.Field == "request_id" {
				code = CodeInvalidCommand
			}
		}
		return reject(code, "invalid command", errs)
	}
	d.Fingerprint = fingerprintReference(&d.Cmd)
	return d
}

func canonicalMetadataReference(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return json.RawMessage("{}"), nil
	}
	if len(raw) > MaxMetadataBytes {
		return nil, fmt.Errorf("must be at most %d bytes", MaxMetadataBytes)
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

func validateBookingReference(b *BookingSpec) []FieldError {
	errs := validateInterval(&b.Start, &b.End, false)
	add := func(f, m string) { errs = append(errs, FieldError{Field: f, Message: m}) }
	switch n := utf8.RuneCountInString(b.Customer); {
	case n == 0:
		add("customer", "is required")
	case n > MaxCustomerLen:
		add("customer", fmt.Sprintf("must be at most %d characters", MaxCustomerLen))
	case !utf8.ValidString(b.Customer):
		add("customer", "must be valid UTF-8")
	}
	if md, err := canonicalMetadataReference(b.Metadata); err != nil {
		add("metadata", err.Error())
	} else {
		b.Metadata = md
	}
	return errs
}

// validateReference is the old Command.Validate; ValidateCalendar,
// ValidateRules and validateInterval are unchanged and shared.
func validateReference(c *Command) []FieldError {
	var errs []FieldError
	add := func(f, m string) { errs = append(errs, FieldError{Field: f, Message: m}) }
	if !refCalendarIDRe.MatchString(c.CalendarID) {
		add("calendar_id", "must match [A-Za-z0-9_-]{1,64}")
	}
	if !refRequestIDRe.MatchString(c.RequestID) {
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
			errs = append(errs, validateBookingReference(c.Booking)...)
			if c.Booking.TTLSeconds < 0 || c.Booking.TTLSeconds > int(MaxHoldTTL/time.Second) {
				add("ttl", fmt.Sprintf("must be from 1 to %d seconds", int(MaxHoldTTL/time.Second)))
			} else if c.Type == TypeBookingCreate && c.Booking.TTLSeconds != 0 {
				add("ttl", "only holds have a ttl")
			}
		}
	case TypeBookingCancel, TypeHoldConfirm, TypeHoldRelease:
		if !refBookingIDRe.MatchString(c.BookingID) {
			add("booking_id", "is not a booking id")
		}
	case TypeBookingReschedule:
		if !refBookingIDRe.MatchString(c.BookingID) {
			add("booking_id", "is not a booking id")
		}
		if c.Reschedule == nil {
			add("reschedule", "is required")
		} else {
			errs = append(errs, validateInterval(&c.Reschedule.Start, &c.Reschedule.End, false)...)
		}
	case TypeHoldExpire:
	case TypeBusySet, TypeBusyClear:
		switch {
		case c.Busy == nil:
			add("busy", "is required")
		case !refBlockIDRe.MatchString(c.Busy.BlockID):
			add("busy.block_id", "must match [A-Za-z0-9._:-]{1,128}")
		case c.Type == TypeBusySet:
			for _, e := range validateInterval(&c.Busy.Start, &c.Busy.End, false) {
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
	default:
		add("type", fmt.Sprintf("unknown command type %q", c.Type))
	}
	// Added with record_ttl_seconds, a new field: only a command that
	// carried a field of that name before it existed decodes differently.
	if c.RecordTTLSeconds < 0 || c.RecordTTLSeconds > MaxRecordTTLSeconds {
		add("record_ttl_seconds", fmt.Sprintf("must be from 0 (keep the record forever) to %d seconds", MaxRecordTTLSeconds))
	}
	return errs
}

func fingerprintReference(c *Command) string {
	body := struct {
		Type       string        `json:"type"`
		CalendarID string        `json:"calendar_id"`
		Calendar   *CalendarSpec `json:"calendar,omitempty"`
		Booking    *BookingSpec  `json:"booking,omitempty"`
		BookingID  string        `json:"booking_id,omitempty"`
		Reschedule *IntervalSpec `json:"reschedule,omitempty"`
		Busy       *BusySpec     `json:"busy,omitempty"`
	}{c.Type, c.CalendarID, c.Calendar, c.Booking, c.BookingID, c.Reschedule, c.Busy}
	b, _ := json.Marshal(body)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
