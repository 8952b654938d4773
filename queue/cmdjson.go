package queue

import (
	"encoding/json"
	"strconv"
	"time"
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
	if c.Calendar != nil || c.Reschedule != nil || c.Busy != nil {
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
		if b, ok = appendTimeJSON(b, bk.Start); !ok {
			return b, false
		}
		b = append(b, `,"end":`...)
		if b, ok = appendTimeJSON(b, bk.End); !ok {
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
	return appendJSONString(append(b, key...), s)
}

// appendTimeJSON appends t as Time.MarshalJSON does; false for the years it
// refuses.
func appendTimeJSON(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
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

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as encoding/json encodes a string (with its
// HTML escaping and its replacement of invalid UTF-8).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
