package actor

// The strict rules for JSON (docs/protocol.md, "Versions" and section 6):
// what encoding/json lets through silently and the strict rules refuse.
// encoding/json keeps the last of two keys that name the same field (also
// when they differ only in case: it matches field names case-insensitively),
// replaces invalid UTF-8 and escaped lone surrogates by U+FFFD, and reads
// -0 as 0. A command decided under the strict rules, and every body the
// HTTP API reads, may contain none of these, so that what is stored is
// exactly what was sent and a body has one meaning for every reader.

import (
	"bytes"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// maxStrictDepth is encoding/json's nesting limit: deeper input is a
// syntax error for both.
const maxStrictDepth = 10000

// strictScan is the result of scanning the first JSON value of some input.
type strictScan struct {
	// ok: the value is valid JSON syntax (what follows it is not looked
	// at). When it is not, encoding/json's error says why.
	ok bool
	// violation is the first thing the strict rules refuse ("" none).
	violation string
	// vCount counts the top-level object's members named v (in any
	// case: encoding/json reads each into the field v), and vRaw is the
	// last one's value as written.
	vCount int
	vRaw   []byte
	// end is where the value ends (when ok).
	end int
}

// scanStrict scans the first JSON value of data. Keys are compared as
// encoding/json matches them to struct fields, case-insensitively, except
// inside a member named metadata (any case), whose keys are a map's and
// compared exactly; -0 is refused outside metadata, whose numbers are kept
// as written.
func scanStrict(data []byte) strictScan { return scanStrictValue(data, false, true) }

// scanStrictValue scans the first JSON value of data: opaque as inside
// metadata, top as the command's own object.
func scanStrictValue(data []byte, opaque, top bool) strictScan {
	s := strictScanner{data: data}
	s.ws()
	s.res.ok = s.value(0, opaque, top)
	s.res.end = s.i
	return s.res
}

// CheckJSON reports the first thing in the first JSON value of body that
// the strict rules refuse: two keys of one object that name the same field,
// invalid UTF-8 or an escaped lone surrogate in a string, or -0. A syntax
// error is not reported (nil): encoding/json's error says more.
func CheckJSON(body []byte) error {
	if sc := scanStrict(body); sc.ok && sc.violation != "" {
		return strictError(sc.violation)
	}
	return nil
}

type strictError string

func (e strictError) Error() string { return string(e) }

type strictScanner struct {
	data []byte
	i    int
	res  strictScan
}

func (s *strictScanner) flag(msg string) {
	if s.res.violation == "" {
		s.res.violation = msg
	}
}

func (s *strictScanner) ws() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *strictScanner) consume(c byte) bool {
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return true
	}
	return false
}

// value scans one value at depth (the number of enclosing objects and
// arrays); opaque is set inside metadata, top for the outermost value.
func (s *strictScanner) value(depth int, opaque, top bool) bool {
	if s.i >= len(s.data) {
		return false
	}
	switch c := s.data[s.i]; {
	case c == '{':
		return depth < maxStrictDepth && s.object(depth+1, opaque, top)
	case c == '[':
		return depth < maxStrictDepth && s.array(depth+1, opaque)
	case c == '"':
		_, ok := s.str(false)
		return ok
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		start := s.i
		if !s.number() {
			return false
		}
		if !opaque && s.i-start == 2 && s.data[start] == '-' && s.data[start+1] == '0' {
			s.flag("-0 is not a number in canonical form")
		}
		return true
	}
	return false
}

func (s *strictScanner) literal(lit string) bool {
	if bytes.HasPrefix(s.data[s.i:], []byte(lit)) {
		s.i += len(lit)
		return true
	}
	return false
}

// number scans -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func (s *strictScanner) number() bool {
	digits := func() int {
		n := 0
		for s.i < len(s.data) && '0' <= s.data[s.i] && s.data[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	s.consume('-')
	if !s.consume('0') && digits() == 0 {
		return false
	}
	if s.consume('.') && digits() == 0 {
		return false
	}
	if s.consume('e') || s.consume('E') {
		if !s.consume('+') {
			s.consume('-')
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

func (s *strictScanner) array(depth int, opaque bool) bool {
	s.i++
	s.ws()
	if s.consume(']') {
		return true
	}
	for {
		if !s.value(depth, opaque, false) {
			return false
		}
		s.ws()
		if !s.consume(',') {
			return s.consume(']')
		}
		s.ws()
	}
}

// manyKeys is the member count from which duplicates are found with a map
// instead of by comparing each key with those before it.
const manyKeys = 16

func (s *strictScanner) object(depth int, opaque, top bool) bool {
	s.i++
	s.ws()
	if s.consume('}') {
		return true
	}
	var (
		small [manyKeys][]byte // on the stack: most objects are small
		keys  = small[:0]
		seen  map[string]struct{}
	)
	for {
		if s.i >= len(s.data) || s.data[s.i] != '"' {
			return false
		}
		key, ok := s.str(true)
		if !ok {
			return false
		}
		s.ws()
		if !s.consume(':') {
			return false
		}
		s.ws()
		if s.res.violation == "" {
			if len(keys) < manyKeys {
				for _, k := range keys {
					if opaque && bytes.Equal(k, key) || !opaque && bytes.EqualFold(k, key) {
						s.flag("duplicate key " + strconv.Quote(string(key)))
					}
				}
				keys = append(keys, key)
			} else {
				if seen == nil {
					seen = make(map[string]struct{}, 2*manyKeys)
					for _, k := range keys {
						seen[dupKey(k, opaque)] = struct{}{}
					}
				}
				dk := dupKey(key, opaque)
				if _, dup := seen[dk]; dup {
					s.flag("duplicate key " + strconv.Quote(string(key)))
				}
				seen[dk] = struct{}{}
			}
		}
		start := s.i
		if !s.value(depth, opaque || bytes.EqualFold(key, []byte("metadata")), false) {
			return false
		}
		if top && !opaque && bytes.EqualFold(key, []byte("v")) {
			s.res.vCount++
			s.res.vRaw = s.data[start:s.i]
		}
		s.ws()
		if !s.consume(',') {
			return s.consume('}')
		}
		s.ws()
	}
}

// dupKey is what two keys have in common when encoding/json takes them
// for the same member: the key itself in a map (opaque), else its case
// folding (the smallest rune of each rune's simple folding orbit, so that
// equal results are bytes.EqualFold).
func dupKey(key []byte, opaque bool) string {
	if opaque {
		return string(key)
	}
	out := make([]rune, 0, len(key))
	for _, r := range string(key) {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		out = append(out, m)
	}
	return string(out)
}

// str scans a string literal; with decode it returns its value (the
// input's bytes when it has no escapes).
func (s *strictScanner) str(decode bool) ([]byte, bool) {
	d := s.data
	start := s.i + 1
	var buf []byte
	escaped := false
	for i := start; i < len(d); {
		switch c := d[i]; {
		case c == '"':
			s.i = i + 1
			if !escaped {
				return d[start:i], true
			}
			return buf, true
		case c == '\\':
			if decode && !escaped {
				buf = append(buf, d[start:i]...)
			}
			escaped = true
			n, r, ok := s.escape(i)
			if !ok {
				return nil, false
			}
			if decode {
				buf = utf8.AppendRune(buf, r)
			}
			i += n
		case c < 0x20:
			return nil, false
		case c < utf8.RuneSelf:
			if escaped && decode {
				buf = append(buf, c)
			}
			i++
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				s.flag("invalid UTF-8 in a string")
			}
			if escaped && decode {
				buf = append(buf, d[i:i+size]...)
			}
			i += size
		}
	}
	return nil, false
}

// escape reads the escape sequence at d[i] (a backslash): its length and
// the rune it stands for. An escaped lone surrogate is flagged (and stands
// for U+FFFD, as encoding/json reads it).
func (s *strictScanner) escape(i int) (n int, r rune, ok bool) {
	d := s.data
	if i+1 >= len(d) {
		return 0, 0, false
	}
	switch d[i+1] {
	case '"', '\\', '/':
		return 2, rune(d[i+1]), true
	case 'b':
		return 2, '\b', true
	case 'f':
		return 2, '\f', true
	case 'n':
		return 2, '\n', true
	case 'r':
		return 2, '\r', true
	case 't':
		return 2, '\t', true
	case 'u':
		u, ok := hex4(d, i+2)
		if !ok {
			return 0, 0, false
		}
		switch {
		case 0xD800 <= u && u < 0xDC00:
			if i+7 < len(d) && d[i+6] == '\\' && d[i+7] == 'u' {
				if lo, ok := hex4(d, i+8); ok && 0xDC00 <= lo && lo < 0xE000 {
					return 12, 0x10000 + (u-0xD800)<<10 + (lo - 0xDC00), true
				}
			}
			s.flag(`an escaped lone UTF-16 surrogate (\u` + string(d[i+2:i+6]) + `) in a string`)
			return 6, utf8.RuneError, true
		case 0xDC00 <= u && u < 0xE000:
			s.flag(`an escaped lone UTF-16 surrogate (\u` + string(d[i+2:i+6]) + `) in a string`)
			return 6, utf8.RuneError, true
		}
		return 6, u, true
	}
	return 0, 0, false
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// maxVersionDigits bounds a schema version (in v or Bookline-Schema): at
// most 999,999,999. A longer number is out of range.
const maxVersionDigits = 9

// canonicalVersion reads a schema version written in canonical decimal: a
// positive integer without sign, leading zeros, fraction or exponent, of
// at most maxVersionDigits digits.
func canonicalVersion(s []byte) (int, bool) {
	if len(s) == 0 || len(s) > maxVersionDigits || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	v := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// canonicalInt reads an integer written in canonical decimal (0, or an
// optional minus and a digit 1-9 followed by digits), of at most
// maxVersionDigits digits: what v may be. ok is false for anything else;
// rangeErr tells a canonical integer that is too long.
func canonicalInt(s []byte) (v int, ok, rangeErr bool) {
	neg := len(s) > 0 && s[0] == '-'
	digits := s
	if neg {
		digits = s[1:]
	}
	if string(digits) == "0" && !neg {
		return 0, true, false
	}
	if len(digits) == 0 || digits[0] < '1' || digits[0] > '9' {
		return 0, false, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false, false
		}
	}
	if len(digits) > maxVersionDigits {
		return 0, false, true
	}
	v, _ = canonicalVersion(digits)
	if neg {
		v = -v
	}
	return v, true, false
}
