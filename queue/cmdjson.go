package queue

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/bookline/bookline/actor"
)

// marshalCommand encodes cmd exactly as json.Marshal does. The commands a
// bulk producer sends (booking.create and the other commands without a
// calendar, busy time or reschedule) are written by hand: json.Marshal's
// reflection was ~3.5% of an import's CPU. Anything else, and metadata or
// times the hand encoder does not vouch for, goes through json.Marshal.
func marshalCommand(cmd *actor.Command) ([]byte, error) {
	if b, ok := appendCommandJSON(make([]byte, 0, 256), cmd); ok {
		return b, nil
	}
	return json.Marshal(cmd)
}

func appendCommandJSON(b []byte, c *actor.Command) ([]byte, bool) {
	if c.Calendar != nil || c.Reschedule != nil || c.Busy != nil || c.Skip != nil {
		return b, false
	}
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(c.V), 10)
	b = appendJSONField(b, `,"type":`, c.Type)
	b = appendJSONField(b, `,"request_id":`, c.RequestID)
	b = appendJSONField(b, `,"calendar_id":`, c.CalendarID)
	if bk := c.Booking; bk != nil {
		var ok bool
		b = append(b, `,"booking":{"start":`...)
		if b, ok = actor.AppendJSONTime(b, bk.Start); !ok {
			return b, false
		}
		b = append(b, `,"end":`...)
		if b, ok = actor.AppendJSONTime(b, bk.End); !ok {
			return b, false
		}
		b = appendJSONField(b, `,"customer":`, bk.Customer)
		if len(bk.Metadata) > 0 {
			if !plainCompactJSON(bk.Metadata) {
				return b, false
			}
			b = append(append(b, `,"metadata":`...), bk.Metadata...)
		}
		if bk.TTLSeconds != 0 {
			b = strconv.AppendInt(append(b, `,"ttl_seconds":`...), int64(bk.TTLSeconds), 10)
		}
		b = append(b, '}')
	}
	if c.BookingID != "" {
		b = appendJSONField(b, `,"booking_id":`, c.BookingID)
	}
	if c.RecordTTLSeconds != 0 {
		b = strconv.AppendInt(append(b, `,"record_ttl_seconds":`...), int64(c.RecordTTLSeconds), 10)
	}
	return append(b, '}'), true
}

func appendJSONField(b []byte, key, s string) []byte {
	return actor.AppendJSONString(append(b, key...), s)
}

// plainCompactJSON reports whether raw (valid JSON, as validation leaves
// metadata) is what json.Marshal writes for it unchanged: compact, and
// nothing it would escape for HTML or rewrite as UTF-8 (conservatively: no
// '<', '>', '&' and no byte above ASCII).
func plainCompactJSON(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c >= utf8.RuneSelf || c == '<' || c == '>' || c == '&':
			return false
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return !in
}
