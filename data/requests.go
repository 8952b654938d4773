package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// BookingID is the id of the booking (or hold) that request reqID creates
// on calendar calID: 128 bits of a hash, as 26 characters of lowercase
// base32hex. A creation's request record lives in that booking's record,
// found from the request id alone.
func BookingID(calID, reqID string) string {
	sum := sha256.Sum256([]byte("booking\x00" + calID + "\x00" + reqID))
	return idEncoding.EncodeToString(sum[:16])
}

// Request returns the recorded outcome of request id reqID on calID: a
// record of its own, or the creation record of the booking it created.
func (t *Tx) Request(calID, reqID string) (RequestRecord, bool, error) {
	if v := t.calTree(calID, iRequests).Get([]byte(reqID)); v != nil {
		rec, err := decodeRecord(v)
		rec.Calendar, rec.RequestID = calID, reqID
		return rec, err == nil, err
	}
	return t.creationRecord(calID, reqID)
}

// creationRecord is the request record kept in the record of the booking
// reqID created, if it did and the record is kept.
func (t *Tx) creationRecord(calID, reqID string) (RequestRecord, bool, error) {
	id := BookingID(calID, reqID)
	if t.knownAbsent(calID, id) {
		return RequestRecord{}, false, nil
	}
	v := t.calTree(calID, iBookings).Get(idKey(id))
	if v == nil {
		t.txCal(calID).absent = id
		return RequestRecord{}, false, nil
	}
	s, err := decodeStoredBooking(calID, id, v)
	if err != nil || s.creation == nil {
		return RequestRecord{}, false, err
	}
	created, err := s.created()
	if err != nil {
		return RequestRecord{}, false, err
	}
	return creationToRecord(calID, reqID, s.creation, &created), true, nil
}

func creationToRecord(calID, reqID string, cr *Creation, created *Booking) RequestRecord {
	return RequestRecord{Calendar: calID, RequestID: reqID, Fingerprint: hex.EncodeToString(cr.Fingerprint[:]),
		Seq: cr.Seq, Expires: cr.Expires, Created: created, V: cr.V, Kind: cr.Kind}
}

// PutRequest records the outcome of a request. Records are kept forever:
// they are what makes an idempotency key outlive NATS's dedupe window.
// A request on a calendar that does not exist is recorded too. Only valid
// commands are recorded, so rec must have a fingerprint.
//
// The record of a request that created a booking or hold is not written
// here but with the booking (CreateBooking): found from the request id
// (the booking's id is BookingID(calID, reqID)), its reply is rebuilt from
// the booking. Any other record keeps rec.Reply.
func (t *Tx) PutRequest(calID, reqID string, rec RequestRecord) error {
	fp, err := hex.DecodeString(rec.Fingerprint)
	if err != nil || len(fp) != 16 {
		return fmt.Errorf("data: request record of %s/%s without a fingerprint of 16 bytes", calID, reqID)
	}
	if err := t.calMark(calID); err != nil {
		return err
	}
	if rec.Created != nil {
		return fmt.Errorf("data: the creation record of %s/%s is written with its booking (CreateBooking)", calID, reqID)
	}
	return t.calTree(calID, iRequests).Put([]byte(reqID), encodeRecord(fp, rec))
}

// Request records of their own are binary: version (1), flags (1:
// expires), seq (uvarint), expiry (8, EncodeTime) when flagged,
// fingerprint (16), reply (the rest, the actor's compact form).
const (
	recordVersion = 3
	recordExpires = 1
)

func encodeRecord(fp []byte, rec RequestRecord) []byte {
	b := make([]byte, 2, 36+len(rec.Reply))
	b[0] = recordVersion
	b = binary.AppendUvarint(b, rec.Seq)
	if !rec.Expires.IsZero() {
		b[1] |= recordExpires
		b = append(b, EncodeTime(rec.Expires)...)
	}
	b = append(b, fp...)
	return append(b, rec.Reply...)
}

func decodeRecord(v []byte) (RequestRecord, error) {
	var rec RequestRecord
	if len(v) < 2 || v[0] != recordVersion {
		return rec, fmt.Errorf("data: malformed request record")
	}
	r := NewReader(v[2:])
	rec.Seq = r.Uvarint()
	if v[1]&recordExpires != 0 {
		if len(r.b) < 8 {
			return rec, fmt.Errorf("data: malformed request record")
		}
		rec.Expires = DecodeTime(r.b[:8])
		r.b = r.b[8:]
	}
	if r.Err() != nil || len(r.b) < 16 {
		return rec, fmt.Errorf("data: malformed request record")
	}
	rec.Fingerprint = hex.EncodeToString(r.b[:16])
	rec.Reply = bytes.Clone(r.b[16:])
	return rec, nil
}

// recordExpiry is the expiry of an encoded request record (zero if it is
// kept forever, or malformed).
func recordExpiry(v []byte) (exp []byte, ok bool) {
	if len(v) < 2 || v[0] != recordVersion || v[1]&recordExpires == 0 {
		return nil, false
	}
	_, n := binary.Uvarint(v[2:])
	if n <= 0 || len(v) < 2+n+8 {
		return nil, false
	}
	return v[2+n : 2+n+8], true
}
