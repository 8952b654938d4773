package actor

// Decoding a message under the rules levels of docs/protocol.md,
// "Versions". A partition decides with rules level 1 until it decided a
// command of schema version 2, then with level 2. Level 1 is the decoding
// of the builds that knew only version 1, byte for byte, so that a log
// they decided is decided again the same; level 2 adds the strict rules
// (strict.go, and the strict field rules of Validate). Which level applies
// depends on the partition's log, so Decode, which needs no state, works
// out both answers where they can differ and apply picks one.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode"
)

// KnownSchemaVersion is the newest command schema version this build can
// decide: it knows 1 to 5. A command of a higher version is never decided
// by this build (Decoded.Newer). Version 2 is version 1's types and fields
// plus schema.upgrade and partition.skip; version 3 adds recurring series
// (series.go), version 4 collective bookings (collective.go), version 5
// collective.fence (collective_votes.go) and the move of a collective
// (collective_move.go). bookline's
// own producers keep writing version 1 (SchemaVersion) for what version 1
// can express.
const KnownSchemaVersion = 5

// knownVersion is KnownSchemaVersion, except in tests that play a newer
// build (SetKnownSchemaVersionForTest).
var knownVersion = KnownSchemaVersion

// SetKnownSchemaVersionForTest makes this process decide as a build that
// knows schema versions 1..v, to test what a newer build does with a log
// (its commands of versions above KnownSchemaVersion are decided as version
// 2 commands). It returns the function that undoes it. Call it only while
// no command is decoded.
func SetKnownSchemaVersionForTest(v int) (restore func()) {
	old := knownVersion
	knownVersion = v
	return func() { knownVersion = old }
}

// KnownVersion is the newest schema version this process decides:
// KnownSchemaVersion, unless a test set another (SetKnownSchemaVersionForTest).
func KnownVersion() int { return knownVersion }

// legacyKnown is the version the builds before rules levels knew: level 1
// holds what they held.
const legacyKnown = 1

// Skip names a partition.skip command that skips a command: its stream
// sequence and request id.
type Skip struct {
	Seq       uint64
	RequestID string
}

// SkipCandidate reports whether d is a command an operator may have
// skipped (docs/protocol.md, "Versions": a command that declares a schema
// version above 1). Before apply decides such a command, the caller must
// look for a later partition.skip naming it in the partition's log and
// say what it found with SetSkip.
func (d *Decoded) SkipCandidate() bool { return d.Declared > 1 }

// SetSkip records the result of the look-up for a skip of d: s, or nil
// when there is none.
func (d *Decoded) SetSkip(s *Skip) { d.Skip, d.skipLooked = s, true }

// Decode turns a raw message into a command. It never fails: a message that
// is not a valid command comes back with Reject set, and one of a schema
// version newer than this build with Newer set.
//
// The result is the decision of rules level 1. Where the strict rules of
// level 2 decide otherwise, that decision is kept aside for apply. A
// message the builds before levels held (a declared version above 1) was
// never decided by any of them: it is decided by the strict rules at every
// level.
func Decode(in Input) Decoded {
	var d Decoded
	fast := decodeLegacy(in, &d)
	if d.Newer > 0 {
		return decodeStrict(in)
	}
	d.strict = strictDifference(in, &d, fast)
	return d
}

// rejection is the reply of a message that is not a valid command.
func rejection(in Input, cmd *Command, code, msg string, details []FieldError) *Reply {
	return &Reply{V: SchemaVersion, RequestID: cmd.RequestID, CalendarID: in.SubjectCalendar,
		Type: cmd.Type, Outcome: OutcomeRejected, Code: code, Message: msg, Details: details, Seq: in.Seq}
}

// decodeLegacy is the decoding of the builds that knew only version 1
// (rules level 1), unchanged, into d (filled in place: Decoded is large).
// It reports whether the fast parser read the body.
func decodeLegacy(in Input, d *Decoded) (fast bool) {
	*d = Decoded{Seq: in.Seq, At: in.At.UTC(), msg: in}
	reject := func(code, msg string, details []FieldError) bool {
		d.Reject = rejection(in, &d.Cmd, code, msg, details)
		return fast
	}
	if v := headerVersion(in.Schema); v > legacyKnown {
		d.Newer = v
		return false
	}
	if len(in.Data) > MaxCommandBytes {
		if v := bodyVersion(in.Data); v > legacyKnown {
			d.Newer = v
			return false
		}
		return reject(CodeInvalidCommand, fmt.Sprintf("command larger than %d bytes", MaxCommandBytes), nil)
	}
	fast, err := unmarshalCommand(in.Data, &d.Cmd)
	switch {
	case err == nil:
	case d.Cmd.V > legacyKnown:
		// Trailing data after a command declared newer: a newer build's.
		d.Newer = d.Cmd.V
		return false
	case err == errTrailingData:
		return reject(CodeInvalidCommand, err.Error(), nil)
	default:
		if v := bodyVersion(in.Data); v > legacyKnown {
			// Not readable as this schema, but declared newer.
			d.Newer = v
			return false
		}
		return reject(CodeInvalidCommand, "command is not valid JSON for the schema: "+err.Error(), nil)
	}
	if d.Cmd.V > legacyKnown {
		d.Newer = d.Cmd.V
		return false
	}
	if d.Cmd.V < 1 {
		return reject(CodeInvalidCommand, fmt.Sprintf("unsupported schema version %d (this writer knows 1..%d)", d.Cmd.V, legacyKnown), nil)
	}
	if d.Cmd.CalendarID != in.SubjectCalendar {
		return reject(CodeInvalidCommand, "calendar_id does not match the subject", nil)
	}
	if errs := d.Cmd.validate(false); len(errs) > 0 {
		return reject(fieldErrorsCode(errs), "invalid command", errs)
	}
	d.Fingerprint = d.Cmd.Fingerprint()
	return fast
}

// fieldErrorsCode is the code of a command refused by its field rules:
// invalid_command when its type or request id is invalid, else
// invalid_request.
func fieldErrorsCode(errs []FieldError) string {
	for _, e := range errs {
		if e.Field == "type" || e.Field == "request_id" {
			return CodeInvalidCommand
		}
	}
	return CodeInvalidRequest
}

// decodeStrict decodes a message under the strict rules of rules level 2
// (docs/protocol.md, section 6).
func decodeStrict(in Input) Decoded {
	d := Decoded{Seq: in.Seq, At: in.At.UTC(), msg: in}
	reject := func(code, msg string, details []FieldError) Decoded {
		d.Reject = rejection(in, &d.Cmd, code, msg, details)
		return d
	}
	// The declared version first, from what every build reads alike: a
	// newer build may accept what this one would reject, so nothing of a
	// newer command may become a rejection here.
	hv, hok := 0, true
	if in.Schema != "" {
		hv, hok = canonicalVersion([]byte(in.Schema))
	}
	sc := scanStrict(in.Data)
	var vErr string
	if sc.ok && sc.vCount == 1 {
		switch v, ok, tooLong := canonicalInt(sc.vRaw); {
		case ok:
			d.Declared = v
		case tooLong:
			vErr = "v is out of range"
		case len(sc.vRaw) > 0 && (sc.vRaw[0] == '-' || '0' <= sc.vRaw[0] && sc.vRaw[0] <= '9'):
			vErr = "v is not an integer in canonical decimal"
		}
	}
	d.Declared = max(d.Declared, hv)
	if d.Declared > knownVersion {
		d.Newer = d.Declared
		return d
	}
	if !hok {
		return reject(CodeInvalidCommand, fmt.Sprintf("the %s header %q is not a schema version (a positive integer in canonical decimal)", headerSchema, in.Schema), nil)
	}
	if len(in.Data) > MaxCommandBytes {
		return reject(CodeInvalidCommand, fmt.Sprintf("command larger than %d bytes", MaxCommandBytes), nil)
	}
	if sc.ok && sc.violation != "" {
		return reject(CodeInvalidCommand, "command is not valid strict JSON: "+sc.violation, nil)
	}
	if vErr != "" {
		return reject(CodeInvalidCommand, "command is not valid strict JSON: "+vErr, nil)
	}
	switch _, err := unmarshalCommand(in.Data, &d.Cmd); {
	case err == errTrailingData:
		return reject(CodeInvalidCommand, err.Error(), nil)
	case err != nil:
		return reject(CodeInvalidCommand, "command is not valid JSON for the schema: "+err.Error(), nil)
	}
	if d.Cmd.V < 1 {
		return reject(CodeInvalidCommand, fmt.Sprintf("unsupported schema version %d (this writer knows 1..%d)", d.Cmd.V, knownVersion), nil)
	}
	if hv != 0 && hv != d.Cmd.V {
		return reject(CodeInvalidCommand, fmt.Sprintf("the %s header says version %d and the body's v %d", headerSchema, hv, d.Cmd.V), nil)
	}
	if d.Cmd.CalendarID != in.SubjectCalendar {
		return reject(CodeInvalidCommand, "calendar_id does not match the subject", nil)
	}
	if errs := d.Cmd.validate(true); len(errs) > 0 {
		return reject(fieldErrorsCode(errs), "invalid command", errs)
	}
	d.Fingerprint = d.Cmd.Fingerprint()
	return d
}

// headerSchema is the name of the header that declares a command's schema
// version (queue.HeaderSchema, which actor does not import).
const headerSchema = "Bookline-Schema"

// strictDifference is the answer the strict rules give to a message that
// rules level 1 decided as d, when it differs from d's: nil when it is the
// same. For a command level 1 accepts only what the strict rules add is
// checked (the strict rules refuse more and change nothing else), cheaply
// when the fast parser read it: it refuses duplicate keys, escapes,
// invalid UTF-8 and -0 itself (also in metadata), so only the header and
// a blank customer remain.
func strictDifference(in Input, d *Decoded, fast bool) *Reply {
	if d.Reject != nil {
		s := decodeStrict(in)
		if s.Reject == nil || reflect.DeepEqual(s.Reject, d.Reject) {
			return nil
		}
		return s.Reject
	}
	if in.Schema != "" {
		if _, ok := canonicalVersion([]byte(in.Schema)); !ok {
			return decodeStrict(in).Reject
		}
	}
	if !fast {
		if sc := scanStrict(in.Data); sc.violation != "" {
			return decodeStrict(in).Reject
		}
	}
	if b := d.Cmd.Booking; b != nil && (d.Cmd.Type == TypeBookingCreate || d.Cmd.Type == TypeHoldCreate) && blank(b.Customer) {
		return rejection(in, &d.Cmd, CodeInvalidRequest, "invalid command", []FieldError{{Field: "customer", Message: "is required"}})
	}
	return nil
}

// scanStrictOpaque scans a metadata value on its own.
func scanStrictOpaque(raw []byte) strictScan { return scanStrictValue(raw, true, false) }

// blank reports whether s holds only white space (and is not empty).
func blank(s string) bool {
	return s != "" && strings.TrimFunc(s, unicode.IsSpace) == ""
}

// headerVersion reads a Bookline-Schema header as the builds before rules
// levels did: a plain positive decimal version, else 0 (the header says
// nothing).
func headerVersion(h string) int {
	if h == "" || h == strconv.Itoa(legacyKnown) {
		return 0
	}
	v, err := strconv.Atoi(h)
	if err != nil || v < 1 || strings.TrimLeft(h, "0123456789") != "" {
		return 0
	}
	return v
}

// bodyVersion reads the v of a JSON object leniently, whatever the rest of
// it holds (0 if there is none, or it is not an integer), as the builds
// before rules levels did. It is asked only for messages that level 1
// cannot take as a command.
func bodyVersion(data []byte) int {
	var env struct {
		V json.RawMessage `json:"v"` // any other field, of any type, is skipped
	}
	if json.NewDecoder(bytes.NewReader(data)).Decode(&env) != nil {
		return 0
	}
	v, err := strconv.Atoi(string(env.V))
	if err != nil {
		return 0
	}
	return v
}
