package actor

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
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

// decodeAccepted is what the HTTP API did with every reply before
// AcceptedBooking: decode it, then take the booking's raw JSON.
func decodeAccepted(raw []byte) (typ string, booking []byte, ok bool) {
	var r struct {
		Type     string          `json:"type"`
		Outcome  string          `json:"outcome"`
		Calendar json.RawMessage `json:"calendar"`
		Booking  json.RawMessage `json:"booking"`
	}
	if json.Unmarshal(raw, &r) != nil || r.Outcome != OutcomeAccepted || len(r.Calendar) > 0 || len(r.Booking) == 0 {
		return "", nil, false
	}
	return r.Type, r.Booking, true
}

// TestAcceptedBookingMatchesDecode: whenever the scan answers, it answers
// what decoding would, and it answers for the replies an accepted booking
// really gets.
func TestAcceptedBookingMatchesDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	n, fast, skipped := 20000, 0, 0
	if testing.Short() {
		n = 3000
	}
	for i := range n {
		rep := randReply(r)
		if i%2 == 0 { // the common shape, with random ids, times and metadata
			rep.Outcome, rep.Code, rep.Message, rep.Details, rep.Created, rep.Calendar, rep.Conflict = OutcomeAccepted, "", "", nil, false, nil, nil
			for rep.Booking == nil {
				rep.Booking = randReply(r).Booking
			}
			if r.IntN(4) > 0 {
				rep.RequestID, rep.CalendarID = "req-"+strconv.Itoa(i), "cal."+strconv.Itoa(r.IntN(100))
				rep.Type = []string{TypeBookingCreate, TypeBookingCancel, TypeHoldConfirm}[r.IntN(3)]
			}
		}
		raw, err := json.Marshal(rep)
		if err != nil && i%2 == 0 && rep.Booking != nil {
			at := time.Date(2027, 3, 1, 9, 0, 0, i, time.UTC)
			bk := rep.Booking
			bk.Start, bk.End, bk.CreatedAt, bk.CancelledAt, bk.ExpiresAt = at, at.Add(time.Hour), at, nil, nil
			bk.Metadata = json.RawMessage(`{"note":"a \"quoted\" }","x":[{}]}`)
			raw, err = json.Marshal(rep)
		}
		if err != nil {
			if i%2 == 0 {
				skipped++
			}
			continue
		}
		for _, in := range [][]byte{raw, raw[:len(raw)-1], append(raw[:len(raw):len(raw)], ' '), bytes.Replace(raw, []byte(`"seq":`), []byte(`"seq": `), 1)} {
			typ, body, ok := acceptedBooking(in)
			if !ok {
				continue
			}
			wtyp, wbody, wok := decodeAccepted(in)
			if !wok || typ != wtyp || !bytes.Equal(body, wbody) {
				t.Fatalf("reply %s:\n scan %q %s\n decode %v %q %s", in, typ, body, wok, wtyp, wbody)
			}
			fast++
		}
		if i%2 == 0 && rep.Booking != nil && rep.Type != "" && rep.Seq < 1e17 && plainID(rep.RequestID+rep.CalendarID+rep.Type) {
			if _, _, ok := acceptedBooking(raw); !ok {
				t.Fatalf("common accepted reply not scanned: %s", raw)
			}
		}
	}
	if fast < n/4 {
		t.Fatalf("only %d of %d replies took the scan (%d unencodable)", fast, n, skipped)
	}
}

// plainID: s has only the characters of a valid request id, which JSON
// writes as themselves.
func plainID(s string) bool {
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") == ""
}

func BenchmarkAcceptedBooking(b *testing.B) {
	at := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	raw, _ := MarshalReply(&Reply{V: 1, RequestID: "req-123456", CalendarID: "cal-42", Type: TypeBookingCreate, Outcome: OutcomeAccepted, Seq: 123456,
		Booking: &data.Booking{ID: BookingID("cal-42", "req-123456"), CalendarID: "cal-42", Start: at, End: at.Add(time.Hour),
			Customer: "customer 17", Status: data.StatusConfirmed, CreatedAt: at.Add(-time.Hour), Metadata: json.RawMessage(`{"note":"a \"quoted\" }"}`)}})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _, _ = acceptedBooking(raw)
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _, _ = decodeAccepted(raw)
		}
	})
}

// acceptedBooking is what the scan of ReadReply gives of an accepted reply
// that carries only a booking: its type and the booking as encoded. ok is
// false when the scan did not read it, or it is of another shape.
func acceptedBooking(raw []byte) (typ string, booking []byte, ok bool) {
	var v ReplyView
	if !scanReply(raw, &v) || v.Outcome != OutcomeAccepted || v.Type == "" || v.Booking == nil || v.Code != "" || v.Message != "" ||
		v.Details != nil || v.Created || v.Calendar != nil || v.Conflict != nil {
		return "", nil, false
	}
	return v.Type, v.Booking, true
}

// rejectedError is what the scan of ReadReply gives of a rejection without
// details: its code and error members as encoded.
func rejectedError(raw []byte) (code string, members []byte, ok bool) {
	var v ReplyView
	if !scanReply(raw, &v) || v.ErrorMembers == nil {
		return "", nil, false
	}
	return v.Code, v.ErrorMembers, true
}

// FuzzReadReply checks ReadReply's scan against encoding/json: whenever
// the scan reads valid JSON, it reads what decoding gives, and its error
// members are the rejection's code, message and conflict.
func FuzzReadReply(f *testing.F) {
	at := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	for _, r := range []Reply{
		{V: 1, RequestID: "r1", CalendarID: "c", Type: TypeBookingCreate, Outcome: OutcomeAccepted, Seq: 7,
			Booking: &data.Booking{ID: "b", CalendarID: "c", Start: at, End: at.Add(time.Hour), Customer: "x", Status: "confirmed", CreatedAt: at, Metadata: json.RawMessage(`{"k":"}"}`)}},
		{V: 1, RequestID: "r2", Type: TypeBookingCreate, Outcome: OutcomeRejected, Code: CodeSlotTaken, Message: "taken", Seq: 8,
			Conflict: &data.Interval{Start: at, End: at.Add(time.Hour)}},
		{V: 1, Outcome: OutcomeRejected, Code: CodeInvalidRequest, Message: "bad", Details: []FieldError{{Field: "a", Message: "b"}, {Field: "c", Message: "d"}}, Seq: 9},
		{V: 1, Type: TypeCalendarUpsert, Outcome: OutcomeAccepted, Created: true, Calendar: &data.Calendar{ID: "c", Name: "n"}, Seq: 10},
	} {
		raw, err := MarshalReply(&r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var v ReplyView
		if !scanReply(raw, &v) || !json.Valid(raw) {
			return
		}
		var want ReplyView
		if err := ReadReply(append([]byte{' '}, raw...), &want); err != nil { // the leading space takes encoding/json
			t.Fatalf("%s: scanned, but encoding/json: %v", raw, err)
		}
		members := v.ErrorMembers
		v.ErrorMembers = nil
		if !reflect.DeepEqual(v, want) {
			t.Fatalf("%s:\n scan %+v\n json %+v", raw, v, want)
		}
		if members != nil {
			var e struct {
				Code     string          `json:"code"`
				Message  string          `json:"message"`
				Conflict json.RawMessage `json:"conflict"`
			}
			if err := json.Unmarshal(append(append([]byte("{"), members...), '}'), &e); err != nil ||
				e.Code != want.Code || e.Message != want.Message || !bytes.Equal(e.Conflict, want.Conflict) {
				t.Fatalf("%s: error members %s (%v)", raw, members, err)
			}
		}
	})
}
