package actor_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// TestReplyBinaryRoundTrip: a reply stored in binary renders to exactly the
// JSON the original rendered to, for every shape of reply.
func TestReplyBinaryRoundTrip(t *testing.T) {
	at := time.Date(2027, 3, 1, 9, 0, 0, 123456789, time.UTC)
	cancelled := at.Add(time.Hour)
	cal := &data.Calendar{ID: "c1", Name: "Ünïcode", Timezone: "Europe/Berlin", CreatedAt: at, UpdatedAt: at}
	bk := &data.Booking{ID: actor.BookingID("c1", "r"), CalendarID: "c1", Start: at, End: at.Add(time.Hour), Customer: "ann \"q\"",
		Status: data.StatusCancelled, CreatedAt: at, CancelledAt: &cancelled, Metadata: json.RawMessage(`{"a":[1,2.50,"x"],"n":12345678901234567890}`)}
	for name, r := range map[string]actor.Reply{
		"accepted booking": {V: 1, RequestID: "r", CalendarID: "c1", Type: actor.TypeBookingCreate, Outcome: actor.OutcomeAccepted, Booking: bk, Seq: 42},
		"calendar created": {V: 1, RequestID: "u", CalendarID: "c1", Type: actor.TypeCalendarUpsert, Outcome: actor.OutcomeAccepted, Created: true, Calendar: cal, Seq: 1},
		"conflict":         {V: 1, RequestID: "r", CalendarID: "c1", Type: actor.TypeBookingCreate, Outcome: actor.OutcomeRejected, Code: actor.CodeSlotTaken, Message: "m", Conflict: &data.Interval{Start: at, End: cancelled}, Seq: 1 << 40},
		"invalid":          {V: 1, CalendarID: "c1", Outcome: actor.OutcomeRejected, Code: actor.CodeInvalidRequest, Message: "invalid", Details: []actor.FieldError{{Field: "start", Message: "is required"}, {Field: "customer", Message: ""}}},
		"empty":            {},
	} {
		want, _ := json.Marshal(&r)
		got, err := actor.BinaryToJSON(actor.AppendReply(nil, &r))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %v\n got %s\nwant %s", name, err, got, want)
		}
	}
	for _, bad := range [][]byte{nil, {9}, {1, 1}, actor.AppendReply(nil, &actor.Reply{Booking: bk})[:40]} {
		if _, err := actor.DecodeReply(bad); err == nil {
			t.Errorf("decoded corrupt %x", bad)
		}
	}
}
