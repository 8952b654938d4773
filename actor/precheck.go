package actor

import (
	"time"

	"github.com/bookline/bookline/data"
)

// Refused answers a booking.create or hold.create from the committed index
// alone, when the index already refuses it at now (a wall clock), or at the
// log now of the calendar's partition if that is later (the writer never
// decides before it): the calendar does not
// exist, a rule of the calendar forbids the interval (or the hold's ttl), or
// it conflicts with bookings, live holds or busy time that are committed.
// reply is the rejection the writer would have given at now, with seq 0 (it
// was not logged), and code its rejection code; code is "" when the command
// might be accepted, or is of another type: only the writer can accept.
//
// It decides with the writer's own functions, so it cannot refuse what the
// writer would accept in the same state. Answering without the log is only
// right for a command that nobody can ask about again: one without an
// idempotency key (a retry must get the logged answer), on an index that is
// not behind the log for the calendar's partition. cmd must be valid
// (Validate).
func Refused(tx *data.Tx, partition int, cmd *Command, now time.Time) (reply []byte, code string, err error) {
	if cmd.Booking == nil || cmd.Booking.Recurrence != nil {
		// A series is answered with every occurrence's outcome, which
		// only its decision lists.
		return nil, "", nil
	}
	if logNow := tx.LogNow(partition); logNow.After(now) {
		now = logNow
	}
	d := &Decoded{At: now.UTC(), Cmd: *cmd}
	var rej *Reply
	switch cmd.Type {
	case TypeBookingCreate:
		_, rej, err = bookable(tx, d)
	case TypeHoldCreate:
		_, _, rej, err = holdable(tx, d)
	}
	if rej == nil || err != nil {
		return nil, "", err
	}
	if reply, err = MarshalReply(rej); err != nil {
		return nil, "", err
	}
	return reply, rej.Code, nil
}
