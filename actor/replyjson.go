package actor

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/bookline/bookline/data"
)

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
	if r.Calendar != nil {
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
	case compactHTMLSafe(bk.Metadata):
		b = append(b, bk.Metadata...)
	default:
		return b, false
	}
	return append(b, '}'), true
}

// appendOmitString appends key and s unless s is empty (omitempty).
func appendOmitString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return AppendJSONString(append(b, key...), s)
}

// AcceptedBooking reads an accepted reply that carries a booking, as
// MarshalReply (or json.Marshal) encodes it, without decoding it: the
// command type and the booking's JSON exactly as encoded. The HTTP API sends
// that booking as its response body, so decoding the whole reply only to
// find it was a visible share of a booking request's CPU. ok is false for
// anything else (a rejection, a calendar, an unexpected shape): the caller
// then decodes the reply with encoding/json.
func AcceptedBooking(raw []byte) (typ string, booking []byte, ok bool) {
	p := fastParser{cursor{data: raw}}
	t, ok := p.replyHead()
	if !ok || t == nil || !p.lit(`,"outcome":"accepted","booking":`) {
		return "", nil, false
	}
	start := p.i
	if !p.skipObject() {
		return "", nil, false
	}
	booking = raw[start:p.i]
	if !p.replyTail() {
		return "", nil, false
	}
	return commandType(t), booking, true
}

// replyHead reads the members a reply starts with, as MarshalReply writes
// them: "v", then "request_id", "calendar_id" and "type" where present. It
// returns the type (nil when absent).
func (p *fastParser) replyHead() (typ []byte, ok bool) {
	if !p.lit(`{"v":`) {
		return nil, false
	}
	if _, ok := p.int(); !ok {
		return nil, false
	}
	for _, key := range [...]string{`,"request_id":`, `,"calendar_id":`, `,"type":`} {
		if p.lit(key) {
			v, ok := p.str()
			if !ok {
				return nil, false
			}
			if key == `,"type":` {
				typ = v
			}
		}
	}
	return typ, true
}

// replyTail reads the member a reply ends with, "seq", and the end.
func (p *fastParser) replyTail() bool {
	if !p.lit(`,"seq":`) {
		return false
	}
	_, ok := p.int()
	return ok && p.lit("}") && p.i == len(p.data)
}

// lit consumes s if the input continues with it.
func (p *cursor) lit(s string) bool {
	if len(p.data)-p.i >= len(s) && string(p.data[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
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

// RejectedError reads a rejected reply without details, as MarshalReply (or
// json.Marshal) encodes it, without decoding it: the rejection code and the
// members `"code":…,"message":…[,"conflict":{…}]` exactly as encoded, which
// are also how the HTTP API's error object encodes them. ok is false for
// anything else (an accepted reply, details, an unexpected shape): the
// caller then decodes the reply with encoding/json.
func RejectedError(raw []byte) (code string, members []byte, ok bool) {
	p := fastParser{cursor{data: raw}}
	if _, ok := p.replyHead(); !ok || !p.lit(`,"outcome":"rejected",`) {
		return "", nil, false
	}
	start := p.i
	if !p.lit(`"code":`) {
		return "", nil, false
	}
	c, ok := p.str()
	if !ok || !p.lit(`,"message":`) {
		return "", nil, false
	}
	if _, ok := p.str(); !ok {
		return "", nil, false
	}
	if p.lit(`,"conflict":`) && !p.skipObject() {
		return "", nil, false
	}
	members = raw[start:p.i]
	if !p.replyTail() {
		return "", nil, false
	}
	return string(c), members, true
}
