package actor

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/bookline/bookline/data"
)

// Request records keep what was decided, not the reply as sent: the
// request id, calendar and sequence are the record's own, the type and
// outcome are a byte each, and a creation's reply is rebuilt from the
// booking it created (data keeps that record with the booking). Replies
// rebuilt from records are identical to the ones first sent
// (recordcodec_test.go).

// commandTypes numbers the command types in records: never reorder, only
// append (0 means the type's name follows).
var commandTypes = []string{"", TypeCalendarUpsert, TypeBookingCreate, TypeBookingCancel, TypeBookingReschedule,
	TypeHoldCreate, TypeHoldConfirm, TypeHoldRelease, TypeHoldExpire, TypeBusySet, TypeBusyClear,
	TypeCollectivePrepare, TypeCollectiveDecide, TypeCollectiveCommit, TypeCollectiveAbort, TypeCollectiveCancel,
	TypePoolUpsert, TypePoolChoose, TypePoolRecord, TypeCollectiveFence, TypeCollectiveMove, TypeCollectiveMoveCommit, TypeCollectiveMoveAbort}

func typeCode(t string) uint8 {
	for i, name := range commandTypes[1:] {
		if name == t {
			return uint8(i + 1)
		}
	}
	return 0
}

const recordReplyVersion = 1

// Outcomes in records.
const (
	recAccepted = 1
	recRejected = 2
)

// AppendRecordReply appends the compact form of r for the request record
// of r's request id on r's calendar.
func AppendRecordReply(b []byte, r *Reply) []byte {
	b = append(b, recordReplyVersion)
	b = data.AppendUvarint(b, uint64(r.V))
	tc := typeCode(r.Type)
	b = append(b, tc)
	if tc == 0 {
		b = data.AppendString(b, r.Type)
	}
	switch r.Outcome {
	case OutcomeAccepted:
		b = append(b, recAccepted)
	case OutcomeRejected:
		b = append(b, recRejected)
	default:
		b = append(b, 0)
		b = data.AppendString(b, r.Outcome)
	}
	return appendReplyParts(b, r, data.AppendRecordBooking)
}

// ReplyFromRecord rebuilds the reply a request record was decided with.
func ReplyFromRecord(rec data.RequestRecord) (Reply, error) {
	if rec.Created != nil {
		bk := *rec.Created
		t := ""
		if int(rec.Kind) < len(commandTypes) {
			t = commandTypes[rec.Kind]
		}
		if t == "" {
			return Reply{}, fmt.Errorf("actor: creation record of %s/%s has command type %d", rec.Calendar, rec.RequestID, rec.Kind)
		}
		return Reply{V: int(rec.V), RequestID: rec.RequestID, CalendarID: rec.Calendar, Type: t,
			Outcome: OutcomeAccepted, Booking: &bk, Seq: rec.Seq}, nil
	}
	r := Reply{RequestID: rec.RequestID, CalendarID: rec.Calendar, Seq: rec.Seq}
	rd := data.NewReader(rec.Reply)
	if rd.Byte() != recordReplyVersion {
		return r, data.ErrCorrupt
	}
	r.V = int(rd.Uvarint())
	if tc := int(rd.Byte()); tc == 0 {
		r.Type = rd.String()
	} else if tc < len(commandTypes) {
		r.Type = commandTypes[tc]
	} else {
		return r, data.ErrCorrupt
	}
	switch rd.Byte() {
	case recAccepted:
		r.Outcome = OutcomeAccepted
	case recRejected:
		r.Outcome = OutcomeRejected
	default:
		r.Outcome = rd.String()
	}
	err := readReplyParts(rd, &r, len(rec.Reply), func(rd *data.Reader) data.Booking { return data.ReadRecordBooking(rd, rec.Calendar) })
	if err != nil {
		return r, err
	}
	return r, rd.Err()
}

// creation is the request record of d when it creates a booking or hold,
// which the writer keeps with the booking (data.Tx.CreateBooking); its
// reply is rebuilt from the booking (ReplyFromRecord). d is decided at its
// log time (d.At), as decide's records are.
func (d *Decoded) creation() *data.Creation {
	cr := &data.Creation{V: uint8(SchemaVersion), Kind: typeCode(d.Cmd.Type), Seq: d.Seq}
	if d.Cmd.RecordTTLSeconds > 0 {
		cr.Expires = d.At.Add(time.Duration(d.Cmd.RecordTTLSeconds) * time.Second)
	}
	hex.Decode(cr.Fingerprint[:], []byte(d.Fingerprint))
	return cr
}

// isCreation reports whether r, the reply to d, is the plain acceptance of
// a booking or hold d created (createBooking, createHold): the record that
// CreateBooking kept with the booking answers it.
func isCreation(d *Decoded, r *Reply) bool {
	return plainCreation(r, d.Cmd.CalendarID, d.Cmd.RequestID, d.Seq) && r.V == SchemaVersion
}

// plainCreation reports whether r, decided at seq for request reqID on
// cal, is the acceptance of the booking or hold it created and nothing
// else: ReplyFromRecord rebuilds exactly such a reply from the booking.
func plainCreation(r *Reply, cal, reqID string, seq uint64) bool {
	return (r.Type == TypeBookingCreate || r.Type == TypeHoldCreate) && r.Outcome == OutcomeAccepted &&
		r.Booking != nil && r.Booking.ID == BookingID(cal, reqID) && r.Booking.CalendarID == cal &&
		r.Code == "" && r.Message == "" && len(r.Details) == 0 && !r.Created && r.Calendar == nil &&
		r.Conflict == nil && r.RequestID == reqID && r.CalendarID == cal && r.Seq == seq && r.V >= 1 && r.V < 256
}

// MigrateRecord converts the request record of an index of the layout
// before this one, which kept the reply as sent, into what the index now
// keeps: for the plain creation of a booking or hold, the creation kept
// with the booking; for any other reply its compact form. It is the
// convert function of data.Migrate, which the store's owner (queue) runs:
// the files are data's, the decoding of replies is the actor's.
func MigrateRecord(rec data.LegacyRecord) (data.MigratedRecord, error) {
	r, err := DecodeReply(rec.Reply)
	if err != nil {
		return data.MigratedRecord{}, err
	}
	if plainCreation(&r, rec.Calendar, rec.RequestID, rec.Seq) {
		cr := &data.Creation{V: uint8(r.V), Kind: typeCode(r.Type), Seq: rec.Seq, Expires: rec.Expires}
		if _, err := hex.Decode(cr.Fingerprint[:], []byte(rec.Fingerprint)); err != nil {
			return data.MigratedRecord{}, err
		}
		return data.MigratedRecord{Creation: cr, Created: r.Booking}, nil
	}
	return data.MigratedRecord{Reply: AppendRecordReply(nil, &r)}, nil
}
