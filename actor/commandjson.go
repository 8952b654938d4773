package actor

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
)

// The JSON codec of the command shape: MarshalCommand for every producer
// (the HTTP API and the importer through queue's publisher, the hold
// expirer), unmarshalCommand for the writer's Decode, and the body a
// command's fingerprint hashes. The common shapes are appended and read by
// hand (fastpath.go holds the reader); everything else, and every error,
// is encoding/json's, so the bytes stay json.Marshal's and the errors the
// texts recorded replies have always carried (fastpath_test.go,
// commandjson_test.go and their fuzz targets compare them).

// MarshalCommand encodes c exactly as json.Marshal does. Commands without
// a calendar, busy or skip body are written by hand: json.Marshal's
// reflection was ~3.5% of an import's CPU. Anything else, and metadata or
// times the hand encoder does not vouch for, goes through json.Marshal.
func MarshalCommand(c *Command) ([]byte, error) {
	if b, ok := appendCommandJSON(make([]byte, 0, 256), c); ok {
		return b, nil
	}
	return json.Marshal(c)
}

// appendCommandJSON appends json.Marshal's encoding of c (field order and
// omitempty as in Command's tags), or reports that it cannot be sure of
// identical bytes.
func appendCommandJSON(b []byte, c *Command) ([]byte, bool) {
	if c.Calendar != nil || c.Busy != nil || c.Skip != nil || c.Collective != nil || c.Pool != nil || c.Move != nil || c.Commits != nil || c.hasSeriesFields() {
		return b, false
	}
	ok := true
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(c.V), 10)
	b = AppendJSONString(append(b, `,"type":`...), c.Type)
	b = AppendJSONString(append(b, `,"request_id":`...), c.RequestID)
	b = AppendJSONString(append(b, `,"calendar_id":`...), c.CalendarID)
	if bk := c.Booking; bk != nil {
		if b, ok = appendBookingSpecJSON(append(b, `,"booking":`...), bk); !ok {
			return b, false
		}
	}
	if c.BookingID != "" {
		b = AppendJSONString(append(b, `,"booking_id":`...), c.BookingID)
	}
	if iv := c.Reschedule; iv != nil {
		if b, ok = appendJSONInterval(append(b, `,"reschedule":`...), iv.Start, iv.End); !ok {
			return b, false
		}
	}
	if c.RecordTTLSeconds != 0 {
		b = strconv.AppendInt(append(b, `,"record_ttl_seconds":`...), int64(c.RecordTTLSeconds), 10)
	}
	return append(b, '}'), true
}

// appendBookingSpecJSON appends json.Marshal's encoding of a BookingSpec
// (and of the fingerprint's copy of it, which has the same fields and
// tags).
func appendBookingSpecJSON(b []byte, bk *BookingSpec) ([]byte, bool) {
	ok := true
	b = append(b, `{"start":`...)
	if b, ok = AppendJSONTime(b, bk.Start); !ok {
		return b, false
	}
	b = append(b, `,"end":`...)
	if b, ok = AppendJSONTime(b, bk.End); !ok {
		return b, false
	}
	b = AppendJSONString(append(b, `,"customer":`...), bk.Customer)
	if len(bk.Metadata) > 0 {
		// Validated metadata is canonical, which the canonical check
		// confirms faster than compactHTMLSafe's json.Valid.
		if !isCanonicalObject(bk.Metadata) && !compactHTMLSafe(bk.Metadata) {
			return b, false
		}
		b = append(append(b, `,"metadata":`...), bk.Metadata...)
	}
	if bk.TTLSeconds != 0 {
		b = strconv.AppendInt(append(b, `,"ttl_seconds":`...), int64(bk.TTLSeconds), 10)
	}
	return append(b, '}'), true
}

// appendFingerprintBody appends what json.Marshal writes for the body that
// Command.Fingerprint hashes, for commands without calendar or busy body
// (those keep json.Marshal). It returns false when it cannot be sure of
// identical bytes: a time that json.Marshal refuses, or metadata that is not
// already compact, HTML-safe, valid JSON.
func appendFingerprintBody(b []byte, c *Command) ([]byte, bool) {
	if c.Calendar != nil || c.Busy != nil {
		return b, false
	}
	ok := true
	b = append(b, `{"type":`...)
	b = AppendJSONString(b, c.Type)
	b = append(b, `,"calendar_id":`...)
	b = AppendJSONString(b, c.CalendarID)
	if bk := c.Booking; bk != nil {
		if b, ok = appendBookingSpecJSON(append(b, `,"booking":`...), bk); !ok {
			return b, false
		}
	}
	if c.BookingID != "" {
		b = append(b, `,"booking_id":`...)
		b = AppendJSONString(b, c.BookingID)
	}
	if iv := c.Reschedule; iv != nil {
		if b, ok = appendJSONInterval(append(b, `,"reschedule":`...), iv.Start, iv.End); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// errTrailingData is unmarshalCommand's error for a command followed by
// more than JSON white space.
var errTrailingData = errors.New("trailing data after the command")

// UnmarshalCommand decodes a command's JSON as the writer does: as
// json.Decoder.Decode into a zero Command, refusing anything but white
// space after it. It does not validate (Decode does).
func UnmarshalCommand(data []byte) (Command, error) {
	var c Command
	_, err := unmarshalCommand(data, &c)
	return c, err
}

// unmarshalCommand decodes data into *c, which must be zero, exactly as
// json.Decoder.Decode followed by the trailing data check: the fast reader
// (parseCommandFast) for the plain shape, encoding/json for everything
// else, so that results and error texts stay those of earlier versions. On
// a decoding error c is zero again; on errTrailingData c holds the decoded
// command. fast reports whether the fast reader read it.
func unmarshalCommand(data []byte, c *Command) (fast bool, err error) {
	if parseCommandFast(data, c) {
		return true, nil
	}
	*c = Command{}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(c); err != nil {
		*c = Command{}
		return false, err
	}
	if trailingData(data, dec) {
		return false, errTrailingData
	}
	return false, nil
}
