package actor

import "github.com/bookline/bookline/data"

// Outcomes of a decided command.
const (
	OutcomeAccepted = "accepted"
	OutcomeRejected = "rejected"
)

// Reply is the decided outcome of one command: what is published to the
// requester's reply subject and stored as the request's record.
//
// The fields and their json tags define the reply. AppendReply (binary),
// MarshalReply (JSON) and ReadReply's scan are fast copies kept by hand, so
// a field added here or to a struct a reply carries must be added to each
// of them: replyfields_test.go fills every field, sends the reply through
// every path that writes it (writer reply, request record, outcome event)
// and fails until it is.
type Reply struct {
	V          int            `json:"v"`
	RequestID  string         `json:"request_id,omitempty"`
	CalendarID string         `json:"calendar_id,omitempty"`
	Type       string         `json:"type,omitempty"`
	Outcome    string         `json:"outcome"`
	Code       string         `json:"code,omitempty"`
	Message    string         `json:"message,omitempty"`
	Details    []FieldError   `json:"details,omitempty"`
	Created    bool           `json:"created,omitempty"`
	Calendar   *data.Calendar `json:"calendar,omitempty"`
	Booking    *data.Booking  `json:"booking,omitempty"`
	Conflict   *data.Interval `json:"conflict,omitempty"`
	// ConflictBookingID names the booking in the way of a collective's
	// prepare (collective.go), so that its refusal, recorded, names it
	// whenever it is answered; absent everywhere else.
	ConflictBookingID string `json:"conflict_booking_id,omitempty"`
	// Occurrences are a series' (series.go): every occurrence of a series
	// booked, those cancelled by a cancel with scope following, the one
	// that refused a series.
	Occurrences []Occurrence `json:"occurrences,omitempty"`
	// Pool is a pool.* command's pool (pool.go): with the order to try
	// its calendars in, for a pool.choose.
	Pool *data.Pool `json:"pool,omitempty"`
	Seq  uint64     `json:"seq"`
}

func (d *Decoded) reply() Reply {
	return Reply{V: SchemaVersion, RequestID: d.Cmd.RequestID, CalendarID: d.Cmd.CalendarID, Type: d.Cmd.Type, Seq: d.Seq}
}

func (d *Decoded) reject(code, msg string) Reply {
	r := d.reply()
	r.Outcome, r.Code, r.Message = OutcomeRejected, code, msg
	return r
}

func (d *Decoded) accept() Reply {
	r := d.reply()
	r.Outcome = OutcomeAccepted
	return r
}
