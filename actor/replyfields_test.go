package actor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// Reply's struct, with its json tags, is the one definition of what a reply
// holds. The binary codec (AppendReply, data.AppendBooking), the hand JSON
// (appendReplyJSON) and the reply scans (AcceptedBooking, RejectedError)
// are faster copies of it, kept by hand because their speed matters. The
// test here fills every field of a Reply and of everything it carries by
// reflection, so that a field added to any of those structs and not taught
// to every copy fails it instead of being dropped silently.

// replyJSONFallback are the Reply fields whose presence alone sends
// MarshalReply to encoding/json.
var replyJSONFallback = []string{"Calendar"}

// The shapes the reply scans exist for, as the fields cleared from a
// completely filled reply: an accepted booking (AcceptedBooking) and a
// rejection without details (RejectedError). A new field that can appear in
// such a reply must be taught to the scan; one that cannot must be added
// here.
var (
	acceptedBookingClears = []string{"Code", "Message", "Details", "Created", "Calendar", "Conflict"}
	rejectedErrorClears   = []string{"Details", "Created", "Calendar", "Booking"}
)

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// filler sets every field of a value, walking into structs, pointers,
// slices (two elements) and maps (two entries), to a value that is not
// zero and that no other field gets, so that a field decoded into another
// one's place shows too.
type filler struct {
	tb testing.TB
	n  int
	// escaped: strings that JSON must escape (which the scans refuse).
	escaped bool
	// jsonOnly leaves zero the fields encoding/json skips (tag "-"): what
	// decoding the JSON of the same reply gives.
	jsonOnly bool
}

func (f *filler) fill(v reflect.Value, path string) {
	f.n++
	switch v.Type() {
	case timeType:
		// UTC and without a monotonic reading, as the decoders return times.
		v.Set(reflect.ValueOf(time.Unix(1_800_000_000+int64(f.n)*3607, int64(f.n)*1_000_003).UTC()))
		return
	case rawType:
		// Compact JSON, which json.Marshal writes and decodes as is.
		v.SetBytes(fmt.Appendf(nil, `{"n":%d}`, f.n))
		return
	}
	switch v.Kind() {
	case reflect.String:
		s := fmt.Sprintf("s%d", f.n)
		if f.escaped {
			s += " <\"&\\\n\t\x01\u2028é>"
		}
		v.SetString(s)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(f.n))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		f.fill(v.Elem(), path)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			f.fill(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		m := reflect.MakeMapWithSize(v.Type(), 2)
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			f.fill(k, path+" key")
			f.fill(e, path+" value")
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			p := path + "." + sf.Name
			if !sf.IsExported() {
				f.tb.Fatalf("%s: the filler cannot set an unexported field", p)
			}
			// Filled either way, so that every other field gets the same
			// value in both views.
			f.fill(v.Field(i), p)
			if f.jsonOnly && sf.Tag.Get("json") == "-" {
				v.Field(i).SetZero()
			}
		}
	default:
		f.tb.Fatalf("%s: the filler does not know %s values", path, v.Type())
	}
}

// filledReplies are a Reply with every field set, and what decoding its
// JSON gives (no fields tagged "-").
type filledReplies struct{ r, decoded Reply }

func fillReply(tb testing.TB, escaped bool) filledReplies {
	var p filledReplies
	for _, view := range []struct {
		r        *Reply
		jsonOnly bool
	}{{&p.r, false}, {&p.decoded, true}} {
		f := filler{tb: tb, escaped: escaped, jsonOnly: view.jsonOnly}
		f.fill(reflect.ValueOf(view.r).Elem(), "Reply")
	}
	return p
}

// without returns p with the named Reply fields zero.
func (p filledReplies) without(tb testing.TB, names []string) filledReplies {
	for _, r := range []*Reply{&p.r, &p.decoded} {
		for _, name := range names {
			f := reflect.ValueOf(r).Elem().FieldByName(name)
			if !f.IsValid() {
				tb.Fatalf("Reply has no field %s", name)
			}
			f.SetZero()
		}
	}
	return p
}

// withOutcome returns p with the outcome set.
func (p filledReplies) withOutcome(o string) filledReplies {
	p.r.Outcome, p.decoded.Outcome = o, o
	return p
}

// TestReplyEncodingsCoverEveryField: with every field of a reply and of
// what it carries set, the binary encoding decodes to the reply, the hand
// JSON is json.Marshal's (and decodes to the reply), and the scans answer
// for the shapes they exist for with what decoding gives.
func TestReplyEncodingsCoverEveryField(t *testing.T) {
	for _, escaped := range []bool{false, true} {
		name := map[bool]string{false: "plain strings", true: "escaped strings"}[escaped]
		full := fillReply(t, escaped)
		checkReplyEncodings(t, name+", every field", full)

		hand := full.without(t, replyJSONFallback)
		checkReplyEncodings(t, name+", no fallback field", hand)
		want, _ := json.Marshal(&hand.r)
		if got, ok := appendReplyJSON(nil, &hand.r); !ok || !bytes.Equal(got, want) {
			t.Errorf("%s: the hand JSON of a reply without %v: %v\n got %s\nwant %s", name, replyJSONFallback, ok, got, want)
		}
		for _, field := range replyJSONFallback {
			r := hand.r
			reflect.ValueOf(&r).Elem().FieldByName(field).Set(reflect.ValueOf(full.r).FieldByName(field))
			if _, ok := appendReplyJSON(nil, &r); ok {
				t.Errorf("%s: a reply with %s takes the hand JSON: take it off replyJSONFallback", name, field)
			}
		}

		accepted := full.without(t, acceptedBookingClears).withOutcome(OutcomeAccepted)
		checkReplyEncodings(t, name+", accepted booking", accepted)
		raw, _ := MarshalReply(&accepted.r)
		wantBooking, _ := json.Marshal(accepted.r.Booking)
		typ, booking, ok := acceptedBooking(raw)
		if ok && (typ != accepted.r.Type || !bytes.Equal(booking, wantBooking)) || !ok && !escaped {
			t.Errorf("%s: acceptedBooking(%s) = %q, %s, %v; want %q, %s (a field that an accepted booking "+
				"never carries goes on acceptedBookingClears)", name, raw, typ, booking, ok, accepted.r.Type, wantBooking)
		}

		rejected := full.without(t, rejectedErrorClears).withOutcome(OutcomeRejected)
		checkReplyEncodings(t, name+", rejection", rejected)
		raw, _ = MarshalReply(&rejected.r)
		code, members, ok := rejectedError(raw)
		var gotMembers Reply
		err := json.Unmarshal(append(append([]byte("{"), members...), '}'), &gotMembers)
		wantMembers := Reply{Code: rejected.r.Code, Message: rejected.r.Message, Conflict: rejected.r.Conflict}
		if ok && (code != rejected.r.Code || err != nil || !reflect.DeepEqual(gotMembers, wantMembers)) || !ok && !escaped {
			t.Errorf("%s: rejectedError(%s) = %q, %s, %v (%v); want code %q and its code, message and conflict "+
				"(a field that such a rejection never carries goes on rejectedErrorClears)", name, raw, code, members, ok, err, rejected.r.Code)
		}
	}
}

// checkReplyEncodings checks every encoding of p.r: binary encode and
// decode give it back, MarshalReply writes json.Marshal's bytes, and those
// decode to p.decoded.
func checkReplyEncodings(t *testing.T, name string, p filledReplies) {
	t.Helper()
	bin := AppendReply(nil, &p.r)
	if got, err := DecodeReply(bin); err != nil || !reflect.DeepEqual(got, p.r) {
		t.Errorf("%s: binary round trip: %v; %s", name, err, diffPath(reflect.ValueOf(got), reflect.ValueOf(p.r), "Reply"))
	}
	want, err := json.Marshal(&p.r)
	if err != nil {
		t.Fatalf("%s: json.Marshal: %v", name, err)
	}
	if got, err := MarshalReply(&p.r); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: MarshalReply: %v\n got %s\nwant %s", name, err, got, want)
	}
	if got, err := BinaryToJSON(bin); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: JSON of the binary form: %v\n got %s\nwant %s", name, err, got, want)
	}
	var got Reply
	if err := json.Unmarshal(want, &got); err != nil || !reflect.DeepEqual(got, p.decoded) {
		t.Errorf("%s: JSON round trip: %v; %s", name, err, diffPath(reflect.ValueOf(got), reflect.ValueOf(p.decoded), "Reply"))
	}
}

// diffPath describes the first field in which got and want differ, for
// messages (reflect.DeepEqual decides whether they do).
func diffPath(got, want reflect.Value, path string) string {
	switch got.Kind() {
	case reflect.Pointer:
		if !got.IsNil() && !want.IsNil() {
			return diffPath(got.Elem(), want.Elem(), path)
		}
	case reflect.Struct:
		if got.Type() == timeType {
			break
		}
		for i := range got.NumField() {
			if !reflect.DeepEqual(got.Field(i).Interface(), want.Field(i).Interface()) {
				return diffPath(got.Field(i), want.Field(i), path+"."+got.Type().Field(i).Name)
			}
		}
	case reflect.Slice:
		if got.Type() == rawType || got.Len() != want.Len() {
			break
		}
		for i := range got.Len() {
			if !reflect.DeepEqual(got.Index(i).Interface(), want.Index(i).Interface()) {
				return diffPath(got.Index(i), want.Index(i), fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	show := func(v reflect.Value) string {
		switch {
		case (v.Kind() == reflect.Pointer || v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.IsNil():
			return "nil"
		case v.Kind() == reflect.Pointer:
			return "set"
		case v.Type() == rawType:
			return fmt.Sprintf("%q", v.Bytes())
		}
		return fmt.Sprintf("%+v", v.Interface())
	}
	return fmt.Sprintf("%s is %s, want %s", path, show(got), show(want))
}
