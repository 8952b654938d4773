package queue

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
)

// BenchmarkMarshalCommand measures the encoding of the command an importer
// or the HTTP API publishes most: a booking.create.
func BenchmarkMarshalCommand(b *testing.B) {
	at := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	cmd := &actor.Command{V: 1, Type: actor.TypeBookingCreate, RequestID: "req-45c48cce2e2d7fbd", CalendarID: "room-12",
		Booking: &actor.BookingSpec{Start: at, End: at.Add(time.Hour), Customer: "Ada Lovelace", Metadata: json.RawMessage(`{"source":"web"}`)}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := actor.MarshalCommand(cmd); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParsePubAck measures the reading of JetStream's acknowledgement
// of every published command: new and duplicate.
func BenchmarkParsePubAck(b *testing.B) {
	for _, bc := range []struct{ name, ack string }{
		{"new", `{"stream":"BOOKLINE_CMD","seq":1234567}`},
		{"duplicate", `{"stream":"BOOKLINE_CMD","seq":1234567,"duplicate": true}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			data := []byte(bc.ack)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parsePubAck(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
