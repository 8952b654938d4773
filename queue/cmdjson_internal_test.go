package queue

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
)

// checkMarshalCommand fails unless marshalCommand writes json.Marshal's
// bytes for cmd.
func checkMarshalCommand(t *testing.T, cmd *actor.Command) {
	t.Helper()
	want, wantErr := json.Marshal(cmd)
	got, err := marshalCommand(cmd)
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Errorf("marshalCommand:\n got %s (%v)\nwant %s (%v)", got, err, want, wantErr)
	}
}

// TestMarshalCommandIsJSONMarshal: the hand encoder of commands writes what
// json.Marshal writes, for every command shape and for strings and metadata
// that need escaping.
func TestMarshalCommandIsJSONMarshal(t *testing.T) {
	var all strings.Builder
	for c := range 256 {
		all.WriteByte(byte(c))
	}
	customers := []string{"", "bob", all.String(), "a\u2028b\u2029c", "emoji 🎉 é", "bad \xff\xfe utf8", `<script>&"'\`, "tab\tnew\nline"}
	zone := time.FixedZone("x", 5*3600+30*60)
	times := []time.Time{time.Date(2027, 1, 1, 10, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 10, 0, 0, 123456789, zone),
		time.Date(2027, 1, 1, 10, 0, 0, 5000, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	metas := []string{"", "{}", "null", `{"a":1,"b":"x y"}`, `{"k":"<b>"}`, `{"k":"é"}`, `{"k":"a\"b","n":[1,2,{"c":null}]}`, `{ "spaced": 1 }`}
	for _, cu := range customers {
		for _, at := range times {
			for _, md := range metas {
				cmd := actor.Command{V: 1, Type: actor.TypeBookingCreate, RequestID: "imp." + cu, CalendarID: "cal-1",
					Booking: &actor.BookingSpec{Start: at, End: at.Add(time.Hour), Customer: cu, Metadata: json.RawMessage(md)}}
				checkMarshalCommand(t, &cmd)
			}
		}
	}
	for _, cmd := range []actor.Command{
		{V: 1, Type: actor.TypeHoldCreate, RequestID: "h", CalendarID: "c",
			Booking: &actor.BookingSpec{Start: times[0], End: times[0].Add(time.Hour), Customer: "x", TTLSeconds: 300}, RecordTTLSeconds: 60},
		{V: 1, Type: actor.TypeBookingCancel, RequestID: "c", CalendarID: "c", BookingID: "b1"},
		{V: 1, Type: actor.TypeCalendarUpsert, RequestID: "u", CalendarID: "c", Calendar: &actor.CalendarSpec{Name: "n", Timezone: "UTC"}},
		{V: 1, Type: actor.TypeBookingReschedule, RequestID: "r", CalendarID: "c", BookingID: "b1",
			Reschedule: &actor.IntervalSpec{Start: times[0], End: times[0].Add(time.Hour)}},
		{},
	} {
		checkMarshalCommand(t, &cmd)
	}
}

// FuzzMarshalCommand checks the hand encoder against json.Marshal on
// arbitrary customers and metadata.
func FuzzMarshalCommand(f *testing.F) {
	f.Add("bob", []byte(`{"a":1}`), int64(0))
	f.Add("\u2028<&>\x00", []byte(`{"k":"v w"}`), int64(999))
	f.Fuzz(func(t *testing.T, customer string, meta []byte, ns int64) {
		if len(meta) > 0 && !json.Valid(meta) {
			return // validation refuses it before any encoding
		}
		at := time.Unix(1800000000, ns%1e9).UTC()
		cmd := actor.Command{V: 1, Type: actor.TypeBookingCreate, RequestID: "r", CalendarID: "c",
			Booking: &actor.BookingSpec{Start: at, End: at.Add(time.Hour), Customer: customer, Metadata: meta}}
		checkMarshalCommand(t, &cmd)
	})
}
