package actor

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
)

func randTimePtr(r *rand.Rand) *time.Time {
	if r.IntN(2) == 0 {
		return nil
	}
	t := randTime(r)
	return &t
}

func randReply(r *rand.Rand) *Reply {
	rep := &Reply{V: r.IntN(3), RequestID: randString(r, 8), CalendarID: randString(r, 6), Type: randString(r, 4),
		Outcome: []string{OutcomeAccepted, OutcomeRejected, randString(r, 5)}[r.IntN(3)], Seq: r.Uint64() >> r.IntN(64)}
	if r.IntN(2) == 0 {
		rep.Code, rep.Message = randString(r, 6), randString(r, 20)
	}
	for n := r.IntN(4) - 1; n > 0; n-- {
		rep.Details = append(rep.Details, FieldError{Field: randString(r, 5), Message: randString(r, 12)})
	}
	if r.IntN(4) == 0 {
		rep.Details = []FieldError{} // empty, not nil: omitted too
	}
	rep.Created = r.IntN(3) == 0
	if r.IntN(2) == 0 {
		bk := &data.Booking{ID: randString(r, 26), CalendarID: randString(r, 6), Start: randTime(r), End: randTime(r),
			Customer: randString(r, 12), Status: randString(r, 6), CreatedAt: randTime(r),
			CancelledAt: randTimePtr(r), ExpiresAt: randTimePtr(r), Metadata: randRawMetadata(r),
			BufferBefore: time.Duration(r.IntN(100)) * time.Minute}
		if r.IntN(3) == 0 {
			bk.Metadata, _ = CanonicalMetadata(json.RawMessage(randJSONObject(r, 0)))
		}
		rep.Booking = bk
	}
	if r.IntN(3) == 0 {
		rep.Conflict = &data.Interval{Start: randTime(r), End: randTime(r)}
	}
	if r.IntN(20) == 0 {
		rep.Calendar = &data.Calendar{ID: randString(r, 5), Timezone: "UTC"}
	}
	return rep
}

// TestMarshalReplyMatchesJSON: the hand encoder writes exactly what
// json.Marshal writes, or hands over to it.
func TestMarshalReplyMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	n, fast := 20000, 0
	if testing.Short() {
		n = 3000
	}
	for range n {
		rep := randReply(r)
		want, wantErr := json.Marshal(rep)
		got, ok := appendReplyJSON(nil, rep)
		if ok {
			fast++
			if wantErr != nil || !bytes.Equal(got, want) {
				t.Fatalf("reply %+v:\n got %s\nwant %s (%v)", rep, got, want, wantErr)
			}
		}
		m, err := MarshalReply(rep)
		if (err == nil) != (wantErr == nil) || !bytes.Equal(m, want) {
			t.Fatalf("MarshalReply of %+v: %s, %v; want %s, %v", rep, m, err, want, wantErr)
		}
	}
	if fast < n/4 {
		t.Fatalf("only %d of %d replies took the hand encoder", fast, n)
	}
}

// TestMarshalReplyOfDecidedCommands: the replies the writer really produces
// (accepted bookings, slot conflicts, invalid commands) take the hand path.
func TestMarshalReplyOfDecidedCommands(t *testing.T) {
	at := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	exp := at.Add(5 * time.Minute)
	for _, rep := range []*Reply{
		{V: 1, RequestID: "r1", CalendarID: "c", Type: TypeBookingCreate, Outcome: OutcomeAccepted, Seq: 7,
			Booking: &data.Booking{ID: BookingID("c", "r1"), CalendarID: "c", Start: at, End: at.Add(time.Hour), Customer: "Ada <a&b>",
				Status: data.StatusConfirmed, CreatedAt: at.Add(-time.Hour), Metadata: json.RawMessage(`{"a":1,"b":[true,null,"x"]}`)}},
		{V: 1, RequestID: "r2", CalendarID: "c", Type: TypeHoldCreate, Outcome: OutcomeAccepted, Seq: 8,
			Booking: &data.Booking{ID: "x", CalendarID: "c", Start: at, End: at.Add(time.Hour), Customer: "Zoë", Status: data.StatusHeld,
				CreatedAt: at, ExpiresAt: &exp, Metadata: json.RawMessage(`{}`)}},
		{V: 1, RequestID: "r3", CalendarID: "c", Type: TypeBookingCreate, Outcome: OutcomeRejected, Code: CodeSlotTaken,
			Message: "the interval overlaps a confirmed booking", Conflict: &data.Interval{Start: at, End: at.Add(30 * time.Minute)}, Seq: 9},
		{V: 1, CalendarID: "c", Outcome: OutcomeRejected, Code: CodeInvalidRequest, Message: "invalid command",
			Details: []FieldError{{Field: "end", Message: "must be after start"}}, Seq: 10},
	} {
		got, ok := appendReplyJSON(nil, rep)
		want, _ := json.Marshal(rep)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("reply %+v: hand path %v\n got %s\nwant %s", rep, ok, got, want)
		}
	}
}

func BenchmarkMarshalReply(b *testing.B) {
	at := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	rep := &Reply{V: 1, RequestID: "req-123456", CalendarID: "cal-42", Type: TypeBookingCreate, Outcome: OutcomeAccepted, Seq: 123456,
		Booking: &data.Booking{ID: BookingID("cal-42", "req-123456"), CalendarID: "cal-42", Start: at, End: at.Add(time.Hour),
			Customer: "customer 17", Status: data.StatusConfirmed, CreatedAt: at.Add(-time.Hour), Metadata: json.RawMessage(`{}`)}}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = MarshalReply(rep)
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(rep)
		}
	})
}
