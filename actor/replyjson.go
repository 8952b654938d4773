package actor

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/bookline/bookline/data"
)

// The JSON codec of the reply shape, which is also the outcome event's
// payload and carries the booking shape: MarshalReply writes it for the
// writer's replies, the request records' answers and the events;
// ReadReply is the one reader of it, for the HTTP API, the importer and
// the internal submitters; UnmarshalReply decodes all of it. No other
// package scans a reply.

// MarshalReply encodes r as JSON: the bytes json.Marshal(r) writes. Every
// reply is encoded once for its requester and once more for its outcome
// event, and encoding/json's reflection was a visible share of a booking's
// CPU, so the common shapes (no calendar) are appended by hand; anything the
// hand encoder cannot be sure of goes to json.Marshal. replyjson_test.go
// compares the two on random and edge-case replies, replyfields_test.go on
// replies with every field set.
func MarshalReply(r *Reply) ([]byte, error) {
	if b, ok := appendReplyJSON(make([]byte, 0, 512), r); ok {
		return b, nil
	}
	return json.Marshal(r)
}

// appendReplyJSON appends json.Marshal's encoding of r (field order and
// omitempty as in Reply's tags). It returns false for a reply with a
// calendar, a time json.Marshal refuses, or metadata that Marshal would
// rewrite (not compact, not HTML-safe, not valid).
func appendReplyJSON(b []byte, r *Reply) ([]byte, bool) {
	if r.Calendar != nil || r.Occurrences != nil || r.Pool != nil {
		return b, false
	}
	ok := true
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(r.V), 10)
	b = appendOmitString(b, `,"request_id":`, r.RequestID)
	b = appendOmitString(b, `,"calendar_id":`, r.CalendarID)
	b = appendOmitString(b, `,"type":`, r.Type)
	b = append(b, `,"outcome":`...)
	b = AppendJSONString(b, r.Outcome)
	b = appendOmitString(b, `,"code":`, r.Code)
	b = appendOmitString(b, `,"message":`, r.Message)
	if len(r.Details) > 0 {
		b = append(b, `,"details":[`...)
		for i, d := range r.Details {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"field":`...)
			b = AppendJSONString(b, d.Field)
			b = append(b, `,"message":`...)
			b = AppendJSONString(b, d.Message)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if r.Created {
		b = append(b, `,"created":true`...)
	}
	if bk := r.Booking; bk != nil {
		b = append(b, `,"booking":`...)
		if b, ok = appendBookingJSON(b, bk); !ok {
			return b, false
		}
	}
	if iv := r.Conflict; iv != nil {
		if b, ok = appendJSONInterval(append(b, `,"conflict":`...), iv.Start, iv.End); !ok {
			return b, false
		}
	}
	b = appendOmitString(b, `,"conflict_booking_id":`, r.ConflictBookingID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	return append(b, '}'), true
}

// appendBookingJSON appends json.Marshal's encoding of a data.Booking.
func appendBookingJSON(b []byte, bk *data.Booking) ([]byte, bool) {
	ok := true
	b = append(b, `{"id":`...)
	b = AppendJSONString(b, bk.ID)
	b = append(b, `,"calendar_id":`...)
	b = AppendJSONString(b, bk.CalendarID)
	b = append(b, `,"start":`...)
	if b, ok = AppendJSONTime(b, bk.Start); !ok {
		return b, false
	}
	b = append(b, `,"end":`...)
	if b, ok = AppendJSONTime(b, bk.End); !ok {
		return b, false
	}
	b = append(b, `,"customer":`...)
	b = AppendJSONString(b, bk.Customer)
	b = append(b, `,"status":`...)
	b = AppendJSONString(b, bk.Status)
	b = append(b, `,"created_at":`...)
	if b, ok = AppendJSONTime(b, bk.CreatedAt); !ok {
		return b, false
	}
	if bk.CancelledAt != nil {
		b = append(b, `,"cancelled_at":`...)
		if b, ok = AppendJSONTime(b, *bk.CancelledAt); !ok {
			return b, false
		}
	}
	if bk.ExpiresAt != nil {
		b = append(b, `,"expires_at":`...)
		if b, ok = AppendJSONTime(b, *bk.ExpiresAt); !ok {
			return b, false
		}
	}
	b = append(b, `,"metadata":`...)
	switch {
	case bk.Metadata == nil:
		b = append(b, "null"...)
	case isCanonicalObject(bk.Metadata) || compactHTMLSafe(bk.Metadata): // the first is faster, and true of stored metadata
		b = append(b, bk.Metadata...)
	default:
		return b, false
	}
	b = appendOmitString(b, `,"series_id":`, bk.SeriesID)
	if len(bk.CalendarIDs) > 0 {
		b = append(b, `,"calendar_ids":[`...)
		for i, id := range bk.CalendarIDs {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSONString(b, id)
		}
		b = append(b, ']')
	}
	b = appendOmitString(b, `,"move_id":`, bk.MoveID)
	b = appendOmitString(b, `,"move_of":`, bk.MoveOf)
	return append(b, '}'), true
}

// appendOmitString appends key and s unless s is empty (omitempty).
func appendOmitString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return AppendJSONString(append(b, key...), s)
}

// lit consumes s if the input continues with it.
func (p *cursor) lit(s string) bool {
	if len(p.data)-p.i >= len(s) && string(p.data[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// member consumes the member key `,"name":` (or any literal of at least
// three bytes) if the input continues with it, comparing the first
// letter of the name before the whole key: most keys a scan tries are
// absent.
func (p *cursor) member(key string) bool {
	return p.i+2 < len(p.data) && p.data[p.i+2] == key[2] && p.lit(key)
}

// skipObject moves past a JSON object that is known to be valid JSON
// (strings may hold escapes and braces).
func (p *cursor) skipObject() bool {
	end, ok := p.objectEnd(math.MaxInt)
	if ok {
		p.i = end
	}
	return ok
}

// ReplyView is a JSON reply as its readers need it, read without decoding
// what it carries: the calendar, booking and conflict are kept as encoded
// (the HTTP API sends them as they are).
type ReplyView struct {
	Type, Outcome, Code, Message string
	Details                      []FieldError
	Created                      bool
	Calendar, Booking, Conflict  json.RawMessage
	// ConflictBookingID is a collective prepare's (Reply.ConflictBookingID).
	ConflictBookingID string
	// Occurrences are a series' (Reply.Occurrences), as encoded.
	Occurrences json.RawMessage
	// Pool is a pool.* command's (Reply.Pool), as encoded.
	Pool json.RawMessage
	Seq  uint64
	// ErrorMembers are, for a rejection with a message and without
	// details, its members `"code":…,"message":…[,"conflict":{…}]` as
	// encoded, which are also how the HTTP API's error object encodes
	// them; nil otherwise, and when the reply was not read by the scan.
	ErrorMembers []byte
}

// ReadReply reads into v a reply that MarshalReply (or json.Marshal)
// encoded: the one reader of the reply's JSON, for the HTTP API, the
// importer and the internal submitters. The shape MarshalReply writes,
// with strings without escapes, is scanned in place: decoding every reply
// with encoding/json was a visible share of a booking request's and of an
// import's CPU. Anything else is decoded by encoding/json, which gives the
// same view but for ErrorMembers, or the error. The ids and v are not
// read.
func ReadReply(raw []byte, v *ReplyView) error {
	*v = ReplyView{}
	if scanReply(raw, v) {
		return nil
	}
	*v = ReplyView{}
	var r struct {
		Type     string          `json:"type"`
		Outcome  string          `json:"outcome"`
		Code     string          `json:"code"`
		Message  string          `json:"message"`
		Details  []FieldError    `json:"details"`
		Created  bool            `json:"created"`
		Calendar json.RawMessage `json:"calendar"`
		Booking  json.RawMessage `json:"booking"`
		Conflict json.RawMessage `json:"conflict"`
		CID      string          `json:"conflict_booking_id"`
		Occur    json.RawMessage `json:"occurrences"`
		Pool     json.RawMessage `json:"pool"`
		Seq      uint64          `json:"seq"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	*v = ReplyView{Type: r.Type, Outcome: r.Outcome, Code: r.Code, Message: r.Message, Details: r.Details,
		Created: r.Created, Calendar: r.Calendar, Booking: r.Booking, Conflict: r.Conflict, ConflictBookingID: r.CID, Occurrences: r.Occur, Pool: r.Pool, Seq: r.Seq}
	return nil
}

// UnmarshalReply decodes a reply that MarshalReply (or json.Marshal)
// encoded, every field of it.
func UnmarshalReply(raw []byte) (Reply, error) {
	var r Reply
	err := json.Unmarshal(raw, &r)
	return r, err
}

// scanReply reads raw in the member order and shape MarshalReply writes:
// {"v":N[,"request_id":…][,"calendar_id":…][,"type":…],"outcome":…
// [,"code":…][,"message":…][,"details":[…]][,"created":true]
// [,"calendar":{…}][,"booking":{…}][,"conflict":{…}][,"occurrences":[…]],"seq":N}, with
// strings without escapes (those are the same decoded as encoded) and
// objects that are valid JSON (MarshalReply's own). ok is false for
// anything else.
func scanReply(raw []byte, v *ReplyView) bool {
	p := fastParser{cursor{data: raw}}
	if !p.lit(`{"v":`) {
		return false
	}
	if _, ok := p.int(); !ok {
		return false
	}
	for _, key := range [...]string{`,"request_id":`, `,"calendar_id":`, `,"type":`} {
		if p.member(key) {
			s, ok := p.str()
			if !ok {
				return false
			}
			if key == `,"type":` {
				v.Type = commandType(s)
			}
		}
	}
	if !p.lit(`,"outcome":`) {
		return false
	}
	o, ok := p.str()
	if !ok {
		return false
	}
	v.Outcome = outcomeString(o)
	start := p.i + 1
	var code, message []byte
	if p.member(`,"code":`) {
		if code, ok = p.str(); !ok {
			return false
		}
		v.Code = codeString(code)
	}
	if p.member(`,"message":`) {
		if message, ok = p.str(); !ok {
			return false
		}
		v.Message = string(message)
	}
	if p.member(`,"details":`) {
		if v.Details, ok = p.details(); !ok {
			return false
		}
	}
	v.Created = p.member(`,"created":true`)
	if v.Calendar, ok = p.rawMember(`,"calendar":`); !ok {
		return false
	}
	if v.Booking, ok = p.rawMember(`,"booking":`); !ok {
		return false
	}
	if v.Conflict, ok = p.rawMember(`,"conflict":`); !ok {
		return false
	}
	if p.member(`,"conflict_booking_id":`) {
		s, ok := p.str()
		if !ok {
			return false
		}
		v.ConflictBookingID = string(s)
	}
	if p.member(`,"occurrences":`) {
		at := p.i
		if p.i >= len(raw) || raw[p.i] != '[' {
			return false
		}
		e, ok := p.containerEnd(math.MaxInt)
		if !ok {
			return false
		}
		p.i, v.Occurrences = e, raw[at:e]
	}
	if v.Pool, ok = p.rawMember(`,"pool":`); !ok {
		return false
	}
	end := p.i
	if !p.lit(`,"seq":`) {
		return false
	}
	seq, ok := p.int()
	if !ok || seq < 0 || !p.lit("}") || p.i != len(raw) {
		return false
	}
	v.Seq = uint64(seq)
	if v.Outcome == OutcomeRejected && code != nil && message != nil && v.Details == nil && !v.Created &&
		v.Calendar == nil && v.Booking == nil && v.Occurrences == nil && v.Pool == nil && v.ConflictBookingID == "" {
		v.ErrorMembers = raw[start:end]
	}
	return true
}

// rawMember reads the member key with an object value, known to be valid
// JSON, if it is next: its value as encoded (nil when absent).
func (p *fastParser) rawMember(key string) (json.RawMessage, bool) {
	if !p.member(key) {
		return nil, true
	}
	at := p.i
	if !p.skipObject() {
		return nil, false
	}
	return p.data[at:p.i], true
}

// details reads a reply's details as MarshalReply writes them: a non-empty
// array of {"field":…,"message":…}.
func (p *fastParser) details() ([]FieldError, bool) {
	if !p.consume('[') {
		return nil, false
	}
	var ds []FieldError
	for {
		if !p.lit(`{"field":`) {
			return nil, false
		}
		f, ok := p.str()
		if !ok || !p.lit(`,"message":`) {
			return nil, false
		}
		m, ok := p.str()
		if !ok || !p.consume('}') {
			return nil, false
		}
		ds = append(ds, FieldError{Field: string(f), Message: string(m)})
		if !p.consume(',') {
			return ds, p.consume(']')
		}
	}
}

// outcomeString returns s as a string, without allocating for the known
// outcomes.
func outcomeString(s []byte) string {
	switch string(s) {
	case OutcomeAccepted:
		return OutcomeAccepted
	case OutcomeRejected:
		return OutcomeRejected
	}
	return string(s)
}

// codeString returns s as a string, without allocating for the codes
// replies carry most.
func codeString(s []byte) string {
	switch string(s) {
	case CodeSlotTaken:
		return CodeSlotTaken
	case CodeExternalBusy:
		return CodeExternalBusy
	case CodeIdempotencyKeyReused:
		return CodeIdempotencyKeyReused
	case CodeInvalidRequest:
		return CodeInvalidRequest
	case CodeInvalidCommand:
		return CodeInvalidCommand
	case CodeBookingNotFound:
		return CodeBookingNotFound
	case CodeCalendarNotFound:
		return CodeCalendarNotFound
	case CodeBufferConflict:
		return CodeBufferConflict
	}
	return string(s)
}
