package actor

import (
	"encoding/json"
	"time"
	"unicode/utf8"
)

// The primitives of the hand-written JSON encoders (commandjson.go,
// replyjson.go): byte-identical to what encoding/json writes for the same
// values, or they say they cannot be.

// appendJSONInterval appends {"start":…,"end":…} as json.Marshal writes an
// IntervalSpec or a data.Interval.
func appendJSONInterval(b []byte, start, end time.Time) ([]byte, bool) {
	ok := true
	b = append(b, `{"start":`...)
	if b, ok = AppendJSONTime(b, start); !ok {
		return b, false
	}
	b = append(b, `,"end":`...)
	if b, ok = AppendJSONTime(b, end); !ok {
		return b, false
	}
	return append(b, '}'), true
}

// AppendJSONTime appends t as Time.MarshalJSON writes it (AppendText uses
// the same strict RFC 3339 formatting and refuses the same times).
func AppendJSONTime(b []byte, t time.Time) ([]byte, bool) {
	b = append(b, '"')
	out, err := t.AppendText(b)
	if err != nil {
		return b, false
	}
	return append(out, '"'), true
}

// compactHTMLSafe reports whether json.Marshal writes the RawMessage raw as
// is: valid JSON (else Marshal fails) in which the compaction and HTML
// escaping Marshal applies change nothing (no white space outside strings,
// no <, >, & or U+2028/U+2029 anywhere). The string tracking may assume
// valid JSON: anything else fails json.Valid.
func compactHTMLSafe(raw []byte) bool {
	inString := false
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			inString = !inString
		case '\\':
			if inString {
				i++ // the escaped byte, ASCII in valid JSON
			}
		case ' ', '\t', '\r', '\n':
			if !inString {
				return false
			}
		case '<', '>', '&':
			return false
		case 0xE2:
			if i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8 {
				return false
			}
		}
	}
	return json.Valid(raw)
}

// AppendJSONString appends s as a JSON string exactly as json.Marshal does
// (HTML escaping on): \" \\ \b \f \n \r \t, other control characters and
// <, >, & as \u00XX (lowercase hex), invalid UTF-8 as \ufffd, U+2028 and
// U+2029 as \u2028 and \u2029.
func AppendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if htmlSafe(c) {
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
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
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
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
