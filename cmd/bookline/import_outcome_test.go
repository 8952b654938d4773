package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// TestReadOutcome: the importer reads of a reply what encoding/json reads, for
// replies of every shape, also with metadata and messages that hold the
// members' keys.
func TestReadOutcome(t *testing.T) {
	at := time.Date(2027, 1, 1, 10, 0, 0, 0, time.UTC)
	bk := func(meta string) *data.Booking {
		return &data.Booking{ID: "b1", CalendarID: "cal-1", Start: at, End: at.Add(time.Hour), Customer: `a "quoted" customer`,
			Status: "confirmed", CreatedAt: at, Metadata: json.RawMessage(meta)}
	}
	replies := []actor.Reply{
		{V: 1, RequestID: "imp.x", CalendarID: "cal-1", Type: actor.TypeBookingCreate, Outcome: actor.OutcomeAccepted, Booking: bk(`{"k":"v"}`), Seq: 7},
		{V: 1, RequestID: "imp.x", CalendarID: "cal-1", Type: actor.TypeBookingCreate, Outcome: actor.OutcomeAccepted,
			Booking: bk(`{"created":true,"seq":1,"outcome":"rejected","code":"x"}`), Seq: 8},
		{V: 1, RequestID: "imp.y", CalendarID: "cal-1", Type: actor.TypeBookingCreate, Outcome: actor.OutcomeRejected, Code: "slot_taken",
			Message: `the slot, "created":true ,"seq":3`, Conflict: &data.Interval{Start: at, End: at.Add(time.Hour)}, Seq: 9},
		{V: 1, RequestID: "imp.z", Outcome: actor.OutcomeRejected, Code: "invalid_request", Message: "bad",
			Details: []actor.FieldError{{Field: "booking.start", Message: `,"created":true`}}, Seq: 10},
		{V: 1, RequestID: "imp.c", CalendarID: "cal-1", Type: actor.TypeCalendarUpsert, Outcome: actor.OutcomeAccepted, Created: true,
			Calendar: &data.Calendar{ID: "cal-1", Name: "cal-1", Timezone: "UTC"}, Seq: 11},
		{V: 1, Outcome: actor.OutcomeRejected, Code: "invalid_command", Message: "not JSON", Seq: 12},
	}
	for i := range replies {
		for _, enc := range []string{"MarshalReply", "encoding/json"} {
			var raw []byte
			var err error
			if enc == "MarshalReply" {
				raw, err = actor.MarshalReply(&replies[i])
			} else {
				raw, err = json.Marshal(&replies[i])
			}
			if err != nil {
				t.Fatal(err)
			}
			var want outcome
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			got, ok := readOutcome(raw)
			if !ok || got != want {
				t.Errorf("%s %s: scan %+v (ok %v), want %+v", enc, raw, got, ok, want)
			}
		}
	}
	for _, bad := range []string{``, `{`, `{"v":1,"outcome":"accepted"`, `{"v":1,"outcome":"accepted","seq":x}`, `not json`} {
		if got, ok := readOutcome([]byte(bad)); ok {
			t.Errorf("%q: read as %+v, want not ok", bad, got)
		}
	}
}

// BenchmarkScanOutcome measures the importer's reading of a reply to each
// row it published: an accepted booking and a conflict.
func BenchmarkScanOutcome(b *testing.B) {
	at := time.Date(2027, 1, 1, 10, 0, 0, 0, time.UTC)
	for _, bc := range []struct {
		name string
		r    actor.Reply
	}{
		{"accepted", actor.Reply{V: 1, RequestID: "imp.x", CalendarID: "cal-1", Type: actor.TypeBookingCreate, Outcome: actor.OutcomeAccepted,
			Booking: &data.Booking{ID: "b1", CalendarID: "cal-1", Start: at, End: at.Add(time.Hour), Customer: "Ada", Status: "confirmed",
				CreatedAt: at, Metadata: json.RawMessage(`{"k":"v"}`)}, Seq: 7}},
		{"conflict", actor.Reply{V: 1, RequestID: "imp.y", CalendarID: "cal-1", Type: actor.TypeBookingCreate, Outcome: actor.OutcomeRejected,
			Code: "slot_taken", Message: "the interval overlaps a confirmed booking", Conflict: &data.Interval{Start: at, End: at.Add(time.Hour)}, Seq: 9}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			raw, err := actor.MarshalReply(&bc.r)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := readOutcome(raw); !ok {
					b.Fatal("not read")
				}
			}
		})
	}
}
