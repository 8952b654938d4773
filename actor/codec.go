package actor

import (
	"encoding/json"

	"github.com/bookline/bookline/data"
)

// The binary form of a Reply, used for request records and outbox entries
// (see data/codec.go for why records are binary). Decoding and rendering it
// as JSON gives the same bytes as rendering the original Reply, and
// decoding gives back every field (replyfields_test.go).

const replyCodecVersion = 1

// Presence flags of the optional parts.
const (
	hasCreated = 1 << iota
	hasCalendar
	hasBooking
	hasConflict
	hasOccurrences
	hasPool
	hasConflictID
)

// AppendReply appends the binary form of r.
func AppendReply(b []byte, r *Reply) []byte {
	b = append(b, replyCodecVersion)
	b = data.AppendUvarint(b, uint64(r.V))
	b = data.AppendString(b, r.RequestID)
	b = data.AppendString(b, r.CalendarID)
	b = data.AppendString(b, r.Type)
	b = data.AppendString(b, r.Outcome)
	b = appendReplyParts(b, r, data.AppendBooking)
	return data.AppendUvarint(b, r.Seq)
}

// DecodeReply reads what AppendReply wrote.
func DecodeReply(b []byte) (Reply, error) {
	var r Reply
	rd := data.NewReader(b)
	if rd.Byte() != replyCodecVersion {
		return r, data.ErrCorrupt
	}
	r.V = int(rd.Uvarint())
	r.RequestID = rd.String()
	r.CalendarID = rd.String()
	r.Type = rd.String()
	r.Outcome = rd.String()
	if err := readReplyParts(rd, &r, len(b), data.ReadBooking); err != nil {
		return r, err
	}
	r.Seq = rd.Uvarint()
	return r, rd.Err()
}

// appendReplyParts appends what both binary forms of a reply share: code,
// message, details, the presence flags and the optional parts, the
// booking written by appendBooking.
func appendReplyParts(b []byte, r *Reply, appendBooking func([]byte, *data.Booking) []byte) []byte {
	b = data.AppendString(b, r.Code)
	b = data.AppendString(b, r.Message)
	b = data.AppendUvarint(b, uint64(len(r.Details)))
	for _, d := range r.Details {
		b = data.AppendString(b, d.Field)
		b = data.AppendString(b, d.Message)
	}
	var flags byte
	if r.Created {
		flags |= hasCreated
	}
	if r.Calendar != nil {
		flags |= hasCalendar
	}
	if r.Booking != nil {
		flags |= hasBooking
	}
	if r.Conflict != nil {
		flags |= hasConflict
	}
	if r.Occurrences != nil {
		flags |= hasOccurrences
	}
	if r.Pool != nil {
		flags |= hasPool
	}
	if r.ConflictBookingID != "" {
		flags |= hasConflictID
	}
	b = append(b, flags)
	if r.Calendar != nil {
		// Calendars are written rarely and will grow (rules): JSON here.
		cj, _ := json.Marshal(r.Calendar)
		b = data.AppendBytes(b, cj)
	}
	if r.Booking != nil {
		b = appendBooking(b, r.Booking)
	}
	if r.Conflict != nil {
		b = data.AppendTime(b, r.Conflict.Start)
		b = data.AppendTime(b, r.Conflict.End)
	}
	if r.ConflictBookingID != "" {
		b = data.AppendString(b, r.ConflictBookingID)
	}
	if r.Occurrences != nil {
		// Rare and bounded (MaxOccurrences): JSON, like a calendar.
		oj, _ := json.Marshal(r.Occurrences)
		b = data.AppendBytes(b, oj)
	}
	if r.Pool != nil {
		// Rare and bounded (MaxPoolMembers): JSON, like a calendar.
		pj, _ := json.Marshal(r.Pool)
		b = data.AppendBytes(b, pj)
	}
	return b
}

// readReplyParts reads what appendReplyParts wrote into r (size bounds
// the details' count: the encoded reply's length).
func readReplyParts(rd *data.Reader, r *Reply, size int, readBooking func(*data.Reader) data.Booking) error {
	r.Code = rd.String()
	r.Message = rd.String()
	if n := rd.Uvarint(); n > 0 && n <= uint64(size) {
		r.Details = make([]FieldError, n)
		for i := range r.Details {
			r.Details[i] = FieldError{Field: rd.String(), Message: rd.String()}
		}
	}
	flags := rd.Byte()
	r.Created = flags&hasCreated != 0
	if flags&hasCalendar != 0 {
		var c data.Calendar
		if err := json.Unmarshal(rd.Bytes(), &c); err != nil {
			return data.ErrCorrupt
		}
		r.Calendar = &c
	}
	if flags&hasBooking != 0 {
		bk := readBooking(rd)
		r.Booking = &bk
	}
	if flags&hasConflict != 0 {
		r.Conflict = &data.Interval{Start: rd.Time(), End: rd.Time()}
	}
	if flags&hasConflictID != 0 {
		r.ConflictBookingID = rd.String()
	}
	if flags&hasOccurrences != 0 {
		if err := json.Unmarshal(rd.Bytes(), &r.Occurrences); err != nil {
			return data.ErrCorrupt
		}
	}
	if flags&hasPool != 0 {
		var p data.Pool
		if err := json.Unmarshal(rd.Bytes(), &p); err != nil {
			return data.ErrCorrupt
		}
		r.Pool = &p
	}
	return nil
}
