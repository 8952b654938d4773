package actor_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// TestRetryAfterChangesGetsFirstReply sends every request of a random log
// again after the whole log (bookings rescheduled, cancelled, holds
// confirmed, released and expired since): each retry whose record is
// still kept must get the reply the request first got, byte for byte,
// although the index keeps compact records and rebuilds a creation's
// reply from its booking. Lookups of the records (RecordJSON) must give
// the same bytes.
func TestRetryAfterChangesGetsFirstReply(t *testing.T) {
	log := genLog(33, 1500)
	msgs := make([]actor.Input, len(log))
	for i, m := range log {
		msgs[i] = m.in
	}
	s := datatest.MustOpen(t)
	first := map[string][]byte{} // calendar/request id -> the first reply
	var last actor.Input
	for _, o := range applyInputs(t, s, 0, msgs...) {
		r := decodeReply(t, o.Reply)
		if r.RequestID == "" || r.Code == actor.CodeIdempotencyKeyReused || r.Code == actor.CodeInvalidCommand {
			continue
		}
		if k := r.CalendarID + "/" + r.RequestID; first[k] == nil {
			first[k] = o.Reply
		}
	}
	last = msgs[len(msgs)-1]
	checked, changed := 0, 0
	for i, m := range msgs {
		want := first[m.SubjectCalendar+"/"+requestID(t, m)]
		if want == nil {
			continue
		}
		if r := decodeReply(t, want); r.Seq != m.Seq {
			continue // not the request's first decision
		}
		r := decodeReply(t, want)
		var rec data.RequestRecord
		var kept bool
		_ = s.View(func(tx *data.Tx) error {
			rec, kept, _ = tx.Request(r.CalendarID, r.RequestID)
			return nil
		})
		if !kept || rec.Seq != m.Seq {
			continue // expired, or the id was used again after that
		}
		if got := recordJSON(t, rec); !bytes.Equal(got, want) {
			t.Fatalf("record of %s/%s:\n%s\nwant\n%s", r.CalendarID, r.RequestID, got, want)
		}
		if r.Booking != nil {
			var now data.Booking
			_ = s.View(func(tx *data.Tx) (err error) { now, err = tx.Booking(r.CalendarID, r.Booking.ID); return err })
			if !now.Start.Equal(r.Booking.Start) || !now.End.Equal(r.Booking.End) || now.Status != r.Booking.Status {
				changed++
			}
		}
		// The retry: the same body, after the whole log.
		last = actor.Input{Seq: last.Seq + 1, At: last.At.Add(time.Millisecond), SubjectCalendar: m.SubjectCalendar, Data: msgs[i].Data}
		got := applyInputs(t, s, 0, last)[0].Reply
		if !bytes.Equal(got, want) {
			t.Fatalf("retry of seq %d (%s/%s):\n%s\nwant\n%s", m.Seq, r.CalendarID, r.RequestID, got, want)
		}
		checked++
	}
	if checked < 300 || changed < 30 {
		t.Fatalf("only %d retries checked, %d of bookings changed since", checked, changed)
	}
	datatest.CheckInvariants(t, s)
}

func requestID(tb testing.TB, in actor.Input) string {
	var env struct {
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(in.Data, &env)
	return env.RequestID
}
