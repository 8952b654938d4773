package actor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor/actortest"
)

// checkMarshalCommand fails unless MarshalCommand writes json.Marshal's
// bytes for cmd, and unless UnmarshalCommand reads them back as
// json.Decoder does.
func checkMarshalCommand(t *testing.T, cmd *Command) {
	t.Helper()
	want, wantErr := json.Marshal(cmd)
	got, err := MarshalCommand(cmd)
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Errorf("MarshalCommand:\n got %s (%v)\nwant %s (%v)", got, err, want, wantErr)
	}
	if err != nil {
		return
	}
	checkUnmarshalCommand(t, got)
}

// checkUnmarshalCommand fails unless UnmarshalCommand decodes data as a
// json.Decoder into a zero Command does, with the same error text.
func checkUnmarshalCommand(t *testing.T, data []byte) {
	t.Helper()
	var want Command
	dec := json.NewDecoder(bytes.NewReader(data))
	wantErr := dec.Decode(&want)
	if wantErr != nil {
		want = Command{}
	} else if trailingData(data, dec) {
		wantErr = errTrailingData
	}
	got, err := UnmarshalCommand(data)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
		t.Errorf("UnmarshalCommand(%s):\n got %+v (%v)\nwant %+v (%v)", data, got, err, want, wantErr)
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
				cmd := Command{V: 1, Type: TypeBookingCreate, RequestID: "imp." + cu, CalendarID: "cal-1",
					Booking: &BookingSpec{Start: at, End: at.Add(time.Hour), Customer: cu, Metadata: json.RawMessage(md)}}
				checkMarshalCommand(t, &cmd)
			}
		}
	}
	for _, cmd := range []Command{
		{V: 1, Type: TypeHoldCreate, RequestID: "h", CalendarID: "c",
			Booking: &BookingSpec{Start: times[0], End: times[0].Add(time.Hour), Customer: "x", TTLSeconds: 300}, RecordTTLSeconds: 60},
		{V: 1, Type: TypeBookingCancel, RequestID: "c", CalendarID: "c", BookingID: "b1"},
		{V: 1, Type: TypeCalendarUpsert, RequestID: "u", CalendarID: "c", Calendar: &CalendarSpec{Name: "n", Timezone: "UTC"}},
		{V: 1, Type: TypeBookingReschedule, RequestID: "r", CalendarID: "c", BookingID: "b1",
			Reschedule: &IntervalSpec{Start: times[0], End: times[0].Add(time.Hour)}},
		{},
	} {
		checkMarshalCommand(t, &cmd)
	}
}

// FuzzMarshalCommand checks the command codec against encoding/json on
// arbitrary customers, metadata, ids and bodies: the hand encoder writes
// json.Marshal's bytes, and the reader decodes them (and the raw input,
// taken as a command's JSON) as json.Decoder does.
func FuzzMarshalCommand(f *testing.F) {
	f.Add("bob", []byte(`{"a":1}`), int64(0), uint8(0), 0)
	f.Add("\u2028<&>\x00", []byte(`{"k":"v w"}`), int64(999), uint8(7), 300)
	f.Add("x", []byte(`{"v":1,"type":"booking.create","booking":{"start":"2026-01-01T10:00:00Z"}} `), int64(-1), uint8(3), -5)
	f.Fuzz(func(t *testing.T, customer string, meta []byte, ns int64, shape uint8, n int) {
		checkUnmarshalCommand(t, meta)
		if len(meta) > 0 && !json.Valid(meta) {
			return // validation refuses it before any encoding
		}
		at := time.Unix(1800000000, ns%1e9).UTC()
		cmd := Command{V: int(shape % 3), Type: TypeBookingCreate, RequestID: customer, CalendarID: "c"}
		if shape&4 == 0 {
			cmd.Booking = &BookingSpec{Start: at, End: at.Add(time.Hour), Customer: customer, Metadata: meta, TTLSeconds: n}
		}
		if shape&8 != 0 {
			cmd.Type, cmd.BookingID = TypeBookingReschedule, customer
			cmd.Reschedule = &IntervalSpec{Start: at, End: at.Add(time.Duration(n) * time.Second)}
		}
		if shape&16 != 0 {
			cmd.RecordTTLSeconds = n
		}
		checkMarshalCommand(t, &cmd)
	})
}

// commandJSONFallback are the Command fields whose presence alone sends
// MarshalCommand to json.Marshal and the writer's reader to encoding/json.
var commandJSONFallback = []string{"Calendar", "Busy", "Skip", "Scope", "Booking.Recurrence", "Booking.OnConflict", "Collective", "Pool", "Move", "Commits"}

// fieldByPath is the field of the struct c points to at a dotted path,
// through pointers.
func fieldByPath(c *Command, path string) reflect.Value {
	v := reflect.ValueOf(c).Elem()
	for _, name := range strings.Split(path, ".") {
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		v = v.FieldByName(name)
	}
	return v
}

// ownBooking gives c a copy of its booking, to change apart from the
// command it was copied from.
func ownBooking(c *Command) {
	if c.Booking != nil {
		b := *c.Booking
		c.Booking = &b
	}
}

// TestCommandCodecCoversEveryField: with every field of a command and of
// what it carries set by reflection, MarshalCommand (which every producer
// uses: the HTTP API, the importer, the hold expirer) writes json.Marshal's
// bytes and the writer's reader gives the command back; without the
// fallback fields, the hand encoder and the fast reader take it. A field
// added to Command or to a body and not taught to the hand codec fails
// here instead of being dropped.
func TestCommandCodecCoversEveryField(t *testing.T) {
	for _, escaped := range []bool{false, true} {
		var full, decoded Command
		actortest.Fill(t, &full, escaped, false)
		actortest.Fill(t, &decoded, escaped, true)
		check := func(name string, c, dec *Command) []byte {
			t.Helper()
			want, err := json.Marshal(c)
			if err != nil {
				t.Fatalf("%s: json.Marshal: %v", name, err)
			}
			if got, err := MarshalCommand(c); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: MarshalCommand: %v\n got %s\nwant %s", name, err, got, want)
			}
			if got, err := UnmarshalCommand(want); err != nil || !reflect.DeepEqual(got, *dec) {
				t.Errorf("%s: UnmarshalCommand: %v; %s", name, err, diffPath(reflect.ValueOf(got), reflect.ValueOf(*dec), "Command"))
			}
			return want
		}
		check(fmt.Sprintf("escaped %v, every field", escaped), &full, &decoded)
		hand, handDecoded := full, decoded
		for _, c := range []*Command{&hand, &handDecoded} {
			ownBooking(c)
			for _, name := range commandJSONFallback {
				fieldByPath(c, name).SetZero()
			}
		}
		name := fmt.Sprintf("escaped %v, no fallback field", escaped)
		want := check(name, &hand, &handDecoded)
		if got, ok := appendCommandJSON(nil, &hand); !ok || !bytes.Equal(got, want) {
			t.Errorf("%s: the hand encoder: %v\n got %s\nwant %s", name, ok, got, want)
		}
		var fast Command
		if ok := parseCommandFast(want, &fast); ok != !escaped || ok && !reflect.DeepEqual(fast, handDecoded) {
			t.Errorf("%s: the fast reader: %v (want %v); %s", name, ok, !escaped, diffPath(reflect.ValueOf(fast), reflect.ValueOf(handDecoded), "Command"))
		}
		for _, field := range commandJSONFallback {
			c := hand
			ownBooking(&c)
			fieldByPath(&c, field).Set(fieldByPath(&full, field))
			if _, ok := appendCommandJSON(nil, &c); ok {
				t.Errorf("%s: a command with %s takes the hand encoder: take it off commandJSONFallback", name, field)
			}
		}
	}
}
