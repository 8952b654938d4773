package httpapi

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/actor/actortest"
	"github.com/bookline/bookline/data"
)

// decodedRejection is what writeReply did with every rejected reply before
// the scan: decode it, then encode the error body (as Fiber's c.JSON does,
// with encoding/json).
func decodedRejection(t *testing.T, raw []byte) (status int, body []byte) {
	var r struct {
		Outcome  string             `json:"outcome"`
		Code     string             `json:"code"`
		Message  string             `json:"message"`
		Details  []actor.FieldError `json:"details"`
		Conflict *Conflict          `json:"conflict"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Outcome != actor.OutcomeRejected {
		t.Fatalf("not a rejection: %s (%v)", raw, err)
	}
	e := &Error{Code: r.Code, Message: r.Message, Details: r.Details, Conflict: r.Conflict}
	body, err := json.Marshal(errorBody{e})
	if err != nil {
		t.Fatal(err)
	}
	return e.Status(), body
}

// TestRejectedErrorMatchesDecode: for rejections the writer encodes, the
// HTTP answer and the error body made of the scanned members are byte for
// byte the one decoding and re-encoding gave, with the same status; and
// conflicts take the scan.
func TestRejectedErrorMatchesDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	codes := []string{actor.CodeSlotTaken, actor.CodeExternalBusy, actor.CodeBookingNotFound, actor.CodeIdempotencyKeyReused, actor.CodeHoldExpired, actor.CodeInvalidRequest, "no_such_code"}
	messages := []string{"the interval overlaps a confirmed booking", "", `a "quoted" <tag> & more`, "ünïcode ✓", "tab\there"}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 3600), time.FixedZone("y", -5*3600-1800)}
	n, scanned := 3000, 0
	for i := range n {
		rep := &actor.Reply{V: 1, RequestID: "r." + string(rune('a'+i%26)), CalendarID: "cal-1", Type: actor.TypeBookingCreate,
			Outcome: actor.OutcomeRejected, Code: codes[r.IntN(len(codes))], Message: messages[r.IntN(len(messages))], Seq: r.Uint64N(1 << 40)}
		if r.IntN(4) > 0 {
			start := time.Unix(r.Int64N(4e9), r.Int64N(1e9)*int64(r.IntN(2))).In(zones[r.IntN(len(zones))])
			rep.Conflict = &data.Interval{Start: start, End: start.Add(time.Duration(r.IntN(600)) * time.Minute)}
		}
		if r.IntN(5) == 0 {
			rep.Details = []actor.FieldError{{Field: "end", Message: "must be after start"}}
		}
		if r.IntN(6) == 0 {
			rep.RequestID, rep.Type = "", ""
		}
		raw, err := actor.MarshalReply(rep)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus, want := decodedRejection(t, raw)
		var v actor.ReplyView
		if err := actor.ReadReply(raw, &v); err != nil {
			t.Fatal(err)
		}
		code, members, ok := v.Code, v.ErrorMembers, v.ErrorMembers != nil
		if st, _, body, err := replyAnswer(raw); err != nil || st != wantStatus || !bytes.Equal(body, want) {
			t.Fatalf("reply %s:\n answer %d %s (%v)\n decode %d %s", raw, st, body, err, wantStatus, want)
		}
		if !ok {
			if rep.Details == nil && rep.Message == messages[0] && rep.Conflict != nil {
				t.Fatalf("a plain conflict did not take the scan: %s", raw)
			}
			continue
		}
		status, known := statusOf[code]
		if !known {
			continue // writeReply decodes these
		}
		scanned++
		got := append(append([]byte(`{"error":{`), members...), "}}"...)
		if status != wantStatus || !bytes.Equal(got, want) {
			t.Fatalf("reply %s:\n scan %d %s\n decode %d %s", raw, status, got, wantStatus, want)
		}
		if slices.Contains([]string{CodeUnavailable, CodeUnauthorized}, code) {
			t.Fatalf("writer rejection with an HTTP-only code %s", code)
		}
	}
	if scanned < n/6 {
		t.Fatalf("only %d of %d rejections took the scan", scanned, n)
	}
}

// BenchmarkReplyAnswer measures the HTTP answer to a writer's reply: an
// accepted booking and a conflict.
func BenchmarkReplyAnswer(b *testing.B) {
	at := time.Date(2027, 1, 1, 10, 0, 0, 0, time.UTC)
	for _, bc := range []struct {
		name string
		r    actor.Reply
	}{
		{"accepted", actor.Reply{V: 1, RequestID: "req-1", CalendarID: "cal-1", Type: actor.TypeBookingCreate, Outcome: actor.OutcomeAccepted,
			Booking: &data.Booking{ID: "b1", CalendarID: "cal-1", Start: at, End: at.Add(time.Hour), Customer: "Ada", Status: "confirmed",
				CreatedAt: at, Metadata: json.RawMessage(`{"k":"v"}`)}, Seq: 7}},
		{"conflict", actor.Reply{V: 1, RequestID: "req-2", CalendarID: "cal-1", Type: actor.TypeBookingCreate, Outcome: actor.OutcomeRejected,
			Code: actor.CodeSlotTaken, Message: "the interval overlaps a confirmed booking", Conflict: &data.Interval{Start: at, End: at.Add(time.Hour)}, Seq: 9}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			raw, err := actor.MarshalReply(&bc.r)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, _, err := replyAnswer(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestReplyAnswerCarriesEveryField: the HTTP answer to a writer's reply
// carries every field of its booking, and every field of a rejection's
// error (code, message, details, conflict), set by reflection: a field
// added to data.Booking, actor.FieldError or data.Interval that the path
// from the writer's reply to the HTTP body drops fails here.
func TestReplyAnswerCarriesEveryField(t *testing.T) {
	for _, escaped := range []bool{false, true} {
		var bk, wantBk data.Booking
		actortest.Fill(t, &bk, escaped, false)
		actortest.Fill(t, &wantBk, escaped, true)
		raw, err := actor.MarshalReply(&actor.Reply{V: 1, RequestID: "r", CalendarID: bk.CalendarID, Type: actor.TypeBookingCreate,
			Outcome: actor.OutcomeAccepted, Booking: &bk, Seq: 9})
		if err != nil {
			t.Fatal(err)
		}
		status, _, body, err := replyAnswer(raw)
		var got data.Booking
		if err != nil || status != http.StatusCreated || json.Unmarshal(body, &got) != nil || !reflect.DeepEqual(got, wantBk) {
			t.Errorf("escaped %v: accepted booking answered %d %s (%v); want the booking %+v", escaped, status, body, err, wantBk)
		}

		// A series: the first booked occurrence with every occurrence.
		var o actor.Occurrence
		actortest.Fill(t, &o, escaped, false)
		raw, err = actor.MarshalReply(&actor.Reply{V: 1, RequestID: "r", CalendarID: bk.CalendarID, Type: actor.TypeBookingCreate,
			Outcome: actor.OutcomeAccepted, Booking: &bk, Occurrences: []actor.Occurrence{o}, Seq: 9})
		if err != nil {
			t.Fatal(err)
		}
		status, _, body, err = replyAnswer(raw)
		var series struct {
			data.Booking
			Occurrences []actor.Occurrence `json:"occurrences"`
		}
		if err != nil || status != http.StatusCreated || json.Unmarshal(body, &series) != nil ||
			!reflect.DeepEqual(series.Booking, wantBk) || !reflect.DeepEqual(series.Occurrences, []actor.Occurrence{o}) {
			t.Errorf("escaped %v: series answered %d %s (%v)", escaped, status, body, err)
		}

		var e Error
		actortest.Fill(t, &e, escaped, true)
		// A refused series' occurrence: the error carries it as encoded.
		for _, occ := range [][]actor.Occurrence{nil, {o}} {
			for _, details := range [][]actor.FieldError{nil, e.Details} {
				want := e
				want.Code, want.Details, want.Occurrences = actor.CodeSlotTaken, details, nil
				// A reply's conflict is an interval: the member and the
				// booking in the way are added by a collective's answer
				// (collective.go), not carried by the reply.
				c := *want.Conflict
				c.CalendarID, c.BookingID = "", ""
				want.Conflict = &c
				if occ != nil {
					want.Occurrences, _ = json.Marshal(occ)
				}
				raw, err := actor.MarshalReply(&actor.Reply{V: 1, RequestID: "r", CalendarID: "c", Type: actor.TypeBookingCreate,
					Outcome: actor.OutcomeRejected, Code: want.Code, Message: want.Message, Details: want.Details, Conflict: intervalOf(want.Conflict),
					Occurrences: occ, Seq: 9})
				if err != nil {
					t.Fatal(err)
				}
				status, code, body, err := replyAnswer(raw)
				var got errorBody
				if err != nil || status != http.StatusConflict || code != want.Code || json.Unmarshal(body, &got) != nil ||
					got.Error == nil || !reflect.DeepEqual(*got.Error, want) {
					t.Errorf("escaped %v: rejection answered %d %s %s (%v); want %+v", escaped, status, code, body, err, want)
				}
			}
		}
	}
}

func intervalOf(c *Conflict) *data.Interval {
	if c == nil {
		return nil
	}
	return &data.Interval{Start: c.Start, End: c.End}
}
