package actor

// Fast paths of Decode for the commands the writer sees most (booking.create,
// booking.cancel, hold.*, booking.reschedule). Decode runs for every message
// in the partition goroutine, and encoding/json (reflection, a Decoder with
// its own buffer, a map round trip for metadata, a Marshal per fingerprint)
// was most of its cost.
//
// Every fast path here is an exact shortcut of the encoding/json code it
// replaces, and only for inputs it fully understands: on anything else it
// answers "not handled" and the caller runs the original code. Request
// records store fingerprints and rejection messages, and a replay of an old
// stream must reproduce them byte for byte, so error texts always come from
// the original code. fastpath_test.go checks the results against a verbatim
// copy of the original implementation (reference_test.go).
//
// This file is bookline's one hand-written JSON reader: the command's
// fast path, ParseObjectFast (HTTP bodies, JetStream's PubAcks) and the
// cursor that the reply's scan (replyjson.go, ReadReply) also uses, each
// read side by side with the encoding/json behaviour it must equal. The
// encoders are in commandjson.go, replyjson.go and jsonappend.go.

import (
	"bytes"
	"encoding/json"
	"time"
	"unicode/utf8"
)

// parseCommandFast decodes data into c exactly as json.Decoder.Decode into
// a zero Command followed by a successful trailingData check would. It
// handles the plain shape producers write: one object, keys spelled exactly
// as the field tags (each at most once), strings without escapes or invalid
// UTF-8, integers without fraction or exponent, and booking, booking_id,
// reschedule and record_ttl_seconds. It returns false for anything else (case-changed,
// unknown or repeated keys, escapes, null, calendar and busy bodies, any
// syntax or type error), possibly with c partly filled: the caller must then
// reset c and decode with encoding/json, which gives the same command or the
// error text the reply has always carried.
func parseCommandFast(data []byte, c *Command) bool {
	p := fastParser{cursor{data: data}}
	p.ws()
	ok := p.object(func(key []byte) (uint, bool) {
		var ok bool
		switch string(key) {
		case "v":
			c.V, ok = p.int()
			return 1 << 0, ok
		case "type":
			var s []byte
			if s, ok = p.str(); ok {
				c.Type = commandType(s)
			}
			return 1 << 1, ok
		case "request_id":
			c.RequestID, ok = p.string()
			return 1 << 2, ok
		case "calendar_id":
			c.CalendarID, ok = p.string()
			return 1 << 3, ok
		case "booking_id":
			c.BookingID, ok = p.string()
			return 1 << 4, ok
		case "booking":
			c.Booking, ok = p.booking()
			return 1 << 5, ok
		case "reschedule":
			c.Reschedule, ok = p.interval()
			return 1 << 6, ok
		case "record_ttl_seconds":
			c.RecordTTLSeconds, ok = p.int()
			return 1 << 7, ok
		}
		return 0, false
	})
	p.ws()
	return ok && p.i == len(p.data)
}

// commandType returns s as a string, without allocating for the known
// command types.
func commandType(s []byte) string {
	switch string(s) {
	case TypeBookingCreate:
		return TypeBookingCreate
	case TypeBookingCancel:
		return TypeBookingCancel
	case TypeBookingReschedule:
		return TypeBookingReschedule
	case TypeHoldCreate:
		return TypeHoldCreate
	case TypeHoldConfirm:
		return TypeHoldConfirm
	case TypeHoldRelease:
		return TypeHoldRelease
	case TypeHoldExpire:
		return TypeHoldExpire
	case TypeCalendarUpsert:
		return TypeCalendarUpsert
	case TypeBusySet:
		return TypeBusySet
	case TypeBusyClear:
		return TypeBusyClear
	}
	return string(s)
}

// cursor is a position in JSON input, shared by parseCommandFast's parser
// and the canonical-metadata check.
type cursor struct {
	data []byte
	i    int
}

// consume skips c if it is next.
func (p *cursor) consume(c byte) bool {
	if p.i < len(p.data) && p.data[p.i] == c {
		p.i++
		return true
	}
	return false
}

// fastParser is the cursor of parseCommandFast.
type fastParser struct{ cursor }

// ws skips JSON white space.
func (p *fastParser) ws() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\r', '\n':
			p.i++
		default:
			return
		}
	}
}

// str reads a string literal and returns its contents, which are also its
// decoded value: it refuses escapes, control characters (invalid JSON) and
// invalid UTF-8 (which encoding/json would replace by U+FFFD).
func (p *fastParser) str() ([]byte, bool) {
	d := p.data
	if p.i >= len(d) || d[p.i] != '"' {
		return nil, false
	}
	start, high := p.i+1, false
	for j := start; j < len(d); j++ {
		switch c := d[j]; {
		case c == '"':
			s := d[start:j]
			if high && !utf8.Valid(s) {
				return nil, false
			}
			p.i = j + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			high = true
		}
	}
	return nil, false
}

func (p *fastParser) string() (string, bool) {
	s, ok := p.str()
	return string(s), ok
}

// int reads an integer the way encoding/json stores a number in an int
// field (strconv.ParseInt of the literal), for literals of at most 18
// digits without fraction, exponent or "-0".
func (p *fastParser) int() (int, bool) {
	d, j := p.data, p.i
	neg := j < len(d) && d[j] == '-'
	if neg {
		j++
	}
	start := j
	var n int64
	for j < len(d) && j-start < 18 && '0' <= d[j] && d[j] <= '9' {
		n = n*10 + int64(d[j]-'0')
		j++
	}
	switch digits := j - start; {
	case digits == 0, d[start] == '0' && (digits > 1 || neg):
		return 0, false
	}
	if j < len(d) {
		switch d[j] {
		case ',', '}', ' ', '\t', '\r', '\n':
		default:
			return 0, false // a 19th digit, a fraction, an exponent, garbage
		}
	}
	if neg {
		n = -n
	}
	if int64(int(n)) != n {
		return 0, false
	}
	p.i = j
	return int(n), true
}

// time reads a time.Time the way encoding/json does: the string literal,
// quotes included, goes to Time.UnmarshalJSON. A parse error is left to
// encoding/json, whose error text the reply carries.
func (p *fastParser) time(t *time.Time) bool {
	start := p.i
	if _, ok := p.str(); !ok {
		return false
	}
	return t.UnmarshalJSON(p.data[start:p.i]) == nil
}

// object runs field for each member of an object, whose key it must
// recognise; a key may appear once (bit i of seen for field index i).
func (p *fastParser) object(field func(key []byte) (bit uint, ok bool)) bool {
	if !p.consume('{') {
		return false
	}
	p.ws()
	if p.consume('}') {
		return true
	}
	var seen uint
	for {
		key, ok := p.str()
		if !ok {
			return false
		}
		p.ws()
		if !p.consume(':') {
			return false
		}
		p.ws()
		bit, ok := field(key)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		p.ws()
		if p.consume(',') {
			p.ws()
			continue
		}
		return p.consume('}')
	}
}

// booking reads a booking body into a new BookingSpec, as encoding/json
// does for a nil *BookingSpec.
func (p *fastParser) booking() (*BookingSpec, bool) {
	b := new(BookingSpec)
	ok := p.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "start":
			return 1 << 0, p.time(&b.Start)
		case "end":
			return 1 << 1, p.time(&b.End)
		case "customer":
			var ok bool
			b.Customer, ok = p.string()
			return 1 << 2, ok
		case "metadata":
			var ok bool
			b.Metadata, ok = p.rawObject()
			return 1 << 3, ok
		case "ttl_seconds":
			var ok bool
			b.TTLSeconds, ok = p.int()
			return 1 << 4, ok
		}
		return 0, false
	})
	return b, ok
}

// interval reads a reschedule body into a new IntervalSpec.
func (p *fastParser) interval() (*IntervalSpec, bool) {
	iv := new(IntervalSpec)
	ok := p.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "start":
			return 1 << 0, p.time(&iv.Start)
		case "end":
			return 1 << 1, p.time(&iv.End)
		}
		return 0, false
	})
	return iv, ok
}

// maxFastDepth bounds the nesting the fast paths accept (encoding/json
// refuses more than 10000 levels in the whole command).
const maxFastDepth = 64

// rawObject reads an object value as a json.RawMessage: a copy of its bytes
// as written, which is what RawMessage.UnmarshalJSON stores. It finds the
// end by bracket counting outside strings and then has the strict scanner
// confirm that exactly those bytes are one valid value (what json.Valid
// says, FuzzStrictScan), so it never accepts what encoding/json would not,
// nor ends the value elsewhere. It also leaves to encoding/json a value
// the strict rules refuse (invalid UTF-8, a repeated key), which the
// strict rules then find in the whole body.
func (p *fastParser) rawObject() (json.RawMessage, bool) {
	end, ok := p.objectEnd(maxFastDepth)
	if !ok {
		return nil, false
	}
	raw := p.data[p.i:end]
	if sc := scanStrictOpaque(raw); !sc.ok || sc.end != len(raw) || sc.violation != "" {
		return nil, false
	}
	p.i = end
	return append(json.RawMessage(nil), raw...), true
}

// objectEnd finds the end (the index after the closing brace) of the object
// at the cursor by counting brackets outside strings, refusing more than
// maxDepth levels. It does not validate: callers either check the bytes or
// read output that is valid JSON by construction.
func (p *cursor) objectEnd(maxDepth int) (int, bool) {
	if p.i >= len(p.data) || p.data[p.i] != '{' {
		return 0, false
	}
	return p.containerEnd(maxDepth)
}

// containerEnd is objectEnd for an object or an array at p.i.
func (p *cursor) containerEnd(maxDepth int) (int, bool) {
	d := p.data
	if p.i >= len(d) || d[p.i] != '{' && d[p.i] != '[' {
		return 0, false
	}
	depth := 0
	for j := p.i; j < len(d); j++ {
		switch d[j] {
		case '"':
			for j++; j < len(d) && d[j] != '"'; j++ {
				if d[j] == '\\' {
					j++
				}
			}
		case '{', '[':
			if depth++; depth > maxDepth {
				return 0, false
			}
		case '}', ']':
			if depth--; depth == 0 {
				return j + 1, true
			}
		}
	}
	return 0, false
}

// isCanonicalObject reports whether raw (already trimmed) is a JSON object
// that CanonicalMetadata's decode (UseNumber, into map[string]any) and
// json.Marshal would give back unchanged: no white space, object keys in
// strictly increasing byte order (so no duplicates) at every level, strings
// whose decoded and re-encoded forms are their bytes as written (no escapes,
// no <, > or &, valid UTF-8 without U+2028/U+2029), numbers in JSON syntax
// (json.Number keeps them as written) and at most maxFastDepth levels.
func isCanonicalObject(raw []byte) bool {
	c := canonChecker{cursor{data: raw}}
	return len(raw) > 0 && raw[0] == '{' && c.value(0) && c.i == len(raw)
}

type canonChecker struct{ cursor }

func (c *canonChecker) value(depth int) bool {
	if c.i >= len(c.data) || depth > maxFastDepth {
		return false
	}
	switch b := c.data[c.i]; {
	case b == '{':
		c.i++
		if c.consume('}') {
			return true
		}
		var prev []byte
		for first := true; ; first = false {
			key, ok := c.str()
			if !ok || !first && bytes.Compare(prev, key) >= 0 {
				return false
			}
			prev = key
			if !c.consume(':') || !c.value(depth+1) {
				return false
			}
			if !c.consume(',') {
				return c.consume('}')
			}
		}
	case b == '[':
		c.i++
		if c.consume(']') {
			return true
		}
		for {
			if !c.value(depth + 1) {
				return false
			}
			if !c.consume(',') {
				return c.consume(']')
			}
		}
	case b == '"':
		_, ok := c.str()
		return ok
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	case b == '-' || '0' <= b && b <= '9':
		return c.number()
	}
	return false
}

func (c *canonChecker) literal(s string) bool {
	if bytes.HasPrefix(c.data[c.i:], []byte(s)) {
		c.i += len(s)
		return true
	}
	return false
}

// str accepts a string that json.Marshal writes back byte for byte.
func (c *canonChecker) str() ([]byte, bool) {
	d := c.data
	if c.i >= len(d) || d[c.i] != '"' {
		return nil, false
	}
	start := c.i + 1
	for j := start; j < len(d); {
		switch b := d[j]; {
		case b == '"':
			c.i = j + 1
			return d[start:j], true
		case b < utf8.RuneSelf:
			if !htmlSafe(b) {
				return nil, false
			}
			j++
		default:
			r, size := utf8.DecodeRune(d[j:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				return nil, false
			}
			j += size
		}
	}
	return nil, false
}

// htmlSafe reports whether json.Marshal writes the ASCII byte b in a string
// as itself: printable, and not ", \, <, > or &.
func htmlSafe(b byte) bool {
	return b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
}

// number accepts the JSON number grammar -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func (c *canonChecker) number() bool {
	d := c.data
	digits := func() int {
		n := 0
		for c.i < len(d) && '0' <= d[c.i] && d[c.i] <= '9' {
			c.i++
			n++
		}
		return n
	}
	c.consume('-')
	if c.consume('0') {
		// no more integer digits
	} else if digits() == 0 {
		return false
	}
	if c.consume('.') && digits() == 0 {
		return false
	}
	if c.consume('e') || c.consume('E') {
		if !c.consume('+') {
			c.consume('-')
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// validIDBytes reports whether s has 1 to max bytes, each allowed by ok.
// It replaces ^[class]{1,max}$ regular expressions whose classes are all
// ASCII: those match byte for byte, and any non-ASCII byte fails both.
func validIDBytes(s string, max int, ok func(byte) bool) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func isAlnum(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

// A FastField is a member ParseObjectFast may meet: its name, exactly as
// the struct field's tag spells it, and where its value goes (one of):
// Str for a string field, Raw for a json.RawMessage field (which it fills
// only with an object), Uint for a uint64 field (an integer of at most 18
// digits), Bool for a bool field; Bytes for a string field too, given as
// the bytes of data that hold it, without a copy (for a caller that only
// compares it).
type FastField struct {
	Name  string
	Str   *string
	Bytes *[]byte
	Raw   *json.RawMessage
	Uint  *uint64
	Bool  *bool
}

// ParseObjectFast decodes data exactly as json.Decoder.Decode into a zero
// struct whose fields are fields would, when nothing but JSON white space
// follows the object. Like the command's fast path it handles only the
// plain shape writers produce (each member once, named exactly as fields,
// strings without escapes, a raw member that is an object) and returns
// false for anything else, possibly with some fields filled: the caller
// must then reset them and decode with encoding/json, which gives the same
// result or the error text. At most 64 fields.
func ParseObjectFast(data []byte, fields []FastField) bool {
	if len(fields) > 64 {
		return false
	}
	p := fastParser{cursor{data: data}}
	p.ws()
	ok := p.object(func(key []byte) (uint, bool) {
		for i := range fields {
			f := &fields[i]
			if string(key) != f.Name {
				continue
			}
			var ok bool
			switch {
			case f.Str != nil:
				*f.Str, ok = p.string()
			case f.Bytes != nil:
				*f.Bytes, ok = p.str()
			case f.Raw != nil:
				*f.Raw, ok = p.rawObject()
			case f.Uint != nil:
				var n int
				n, ok = p.int()
				ok = ok && n >= 0
				*f.Uint = uint64(n)
			case f.Bool != nil:
				*f.Bool = p.lit("true")
				ok = *f.Bool || p.lit("false")
			}
			return 1 << uint(i), ok
		}
		return 0, false
	})
	p.ws()
	return ok && p.i == len(p.data)
}
