package actor

import (
	"encoding/json"
	"strconv"

	"github.com/bookline/bookline/data"
)

// MarshalReply encodes r as JSON: the bytes json.Marshal(r) writes. Every
// reply is encoded once for its requester and once more for its outcome
// event, and encoding/json's reflection was a visible share of a booking's
// CPU, so the common shapes (no calendar) are appended by hand; anything the
// hand encoder cannot be sure of goes to json.Marshal. replyjson_test.go
// compares the two on random and edge-case replies.
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
	b = appendJSONString(b, r.Outcome)
	b = appendOmitString(b, `,"code":`, r.Code)
	b = appendOmitString(b, `,"message":`, r.Message)
	if len(r.Details) > 0 {
		b = append(b, `,"details":[`...)
		for i, d := range r.Details {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"field":`...)
			b = appendJSONString(b, d.Field)
			b = append(b, `,"message":`...)
			b = appendJSONString(b, d.Message)
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
	b = appendJSONString(b, bk.ID)
	b = append(b, `,"calendar_id":`...)
	b = appendJSONString(b, bk.CalendarID)
	b = append(b, `,"start":`...)
	if b, ok = appendJSONTime(b, bk.Start); !ok {
		return b, false
	}
	b = append(b, `,"end":`...)
	if b, ok = appendJSONTime(b, bk.End); !ok {
		return b, false
	}
	b = append(b, `,"customer":`...)
	b = appendJSONString(b, bk.Customer)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, bk.Status)
	b = append(b, `,"created_at":`...)
	if b, ok = appendJSONTime(b, bk.CreatedAt); !ok {
		return b, false
	}
	if bk.CancelledAt != nil {
		b = append(b, `,"cancelled_at":`...)
		if b, ok = appendJSONTime(b, *bk.CancelledAt); !ok {
			return b, false
		}
	}
	if bk.ExpiresAt != nil {
		b = append(b, `,"expires_at":`...)
		if b, ok = appendJSONTime(b, *bk.ExpiresAt); !ok {
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
	return appendJSONString(append(b, key...), s)
}
