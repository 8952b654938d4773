package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Request returns the recorded outcome of request id reqID on calID.
//
// A record without a fingerprint is reported as absent: only invalid
// commands were recorded without one, by versions that let an invalid
// command consume its request id. Ignoring them (here and in the digest)
// makes an index built by such a version decide, and digest, like a
// replay of the same log by this one.
func (t *Tx) Request(calID, reqID string) (RequestRecord, bool, error) {
	var rec RequestRecord
	b := t.calSub(calID, iRequests)
	if b == nil {
		return rec, false, nil
	}
	v := b.Get([]byte(reqID))
	if v == nil || legacyInvalidRecord(v) {
		return rec, false, nil
	}
	rec, err := decodeRecord(v)
	return rec, err == nil, err
}

// legacyInvalidRecord reports whether an encoded request record is the
// rejection of an invalid command (no fingerprint), see Request.
func legacyInvalidRecord(v []byte) bool { return len(v) >= 10 && v[0] == recordVersion && v[9] == 0 }

// PutRequest records the outcome of a request. Records are kept forever:
// they are what makes an idempotency key outlive NATS's dedupe window.
// A request on a calendar that does not exist is recorded too. Only valid
// commands are recorded, so rec must have a fingerprint.
func (t *Tx) PutRequest(calID, reqID string, rec RequestRecord) error {
	if rec.Fingerprint == "" {
		return fmt.Errorf("data: request record of %s/%s without a fingerprint", calID, reqID)
	}
	if _, err := t.calBucket(calID, true); err != nil {
		return err
	}
	return t.calSub(calID, iRequests).Put([]byte(reqID), encodeRecord(rec))
}

// Request records are binary, not JSON: they are written once per command
// and JSON would re-validate the embedded reply on every encode.
// Layout of a record kept forever: version 1 (1 byte), seq (8), fingerprint
// length (1), fingerprint, reply (the rest). A record that expires is
// version 2: version (1), seq (8), expiry (8, EncodeTime), fingerprint
// length (1), fingerprint, reply. Records kept forever keep the first
// layout, so indexes and digests of logs without retention are unchanged.
const (
	recordVersion         = 1
	recordVersionExpiring = 2
)

func encodeRecord(rec RequestRecord) []byte {
	b := make([]byte, 0, 18+len(rec.Fingerprint)+len(rec.Reply))
	if rec.Expires.IsZero() {
		b = append(b, recordVersion)
		b = binary.BigEndian.AppendUint64(b, rec.Seq)
	} else {
		b = append(b, recordVersionExpiring)
		b = binary.BigEndian.AppendUint64(b, rec.Seq)
		b = append(b, EncodeTime(rec.Expires)...)
	}
	b = append(b, byte(len(rec.Fingerprint)))
	b = append(b, rec.Fingerprint...)
	return append(b, rec.Reply...)
}

func decodeRecord(v []byte) (RequestRecord, error) {
	var rec RequestRecord
	bad := fmt.Errorf("data: malformed request record")
	if len(v) < 10 {
		return rec, bad
	}
	rec.Seq = binary.BigEndian.Uint64(v[1:9])
	rest := v[9:]
	switch v[0] {
	case recordVersion:
	case recordVersionExpiring:
		if len(rest) < 9 {
			return rec, bad
		}
		rec.Expires = DecodeTime(rest[:8])
		rest = rest[8:]
	default:
		return rec, bad
	}
	n := int(rest[0])
	if len(rest) < 1+n {
		return rec, bad
	}
	rec.Fingerprint = string(rest[1 : 1+n])
	rec.Reply = bytes.Clone(rest[1+n:])
	return rec, nil
}
