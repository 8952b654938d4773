package actor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/bookline/bookline/actor/actortest"
	"github.com/bookline/bookline/data"
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
var replyJSONFallback = []string{"Calendar", "Occurrences", "Pool"}

// The shapes the reply scans exist for, as the fields cleared from a
// completely filled reply: an accepted booking (AcceptedBooking) and a
// rejection without details (RejectedError). A new field that can appear in
// such a reply must be taught to the scan; one that cannot must be added
// here. A series' rejection carries its refused occurrence, which the
// HTTP API's error object names in another shape (occurrence): it is read
// the slow way, so Occurrences is cleared for the rejection's scan. A
// pool's reply (Pool) carries no booking and is never a rejection. A
// collective prepare's refusal names the booking in the way
// (ConflictBookingID), which the API puts in its conflict object: read
// the slow way too.
var (
	acceptedBookingClears = []string{"Code", "Message", "Details", "Created", "Calendar", "Conflict", "ConflictBookingID", "Pool"}
	rejectedErrorClears   = []string{"Details", "Created", "Calendar", "Booking", "Occurrences", "Pool", "ConflictBookingID"}
)

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// filledReplies are a Reply with every field set, and what decoding its
// JSON gives (no fields tagged "-").
type filledReplies struct{ r, decoded Reply }

func fillReply(tb testing.TB, escaped bool) filledReplies {
	var p filledReplies
	for _, view := range []struct {
		r        *Reply
		jsonOnly bool
	}{{&p.r, false}, {&p.decoded, true}} {
		f := actortest.Filler{TB: tb, Escaped: escaped, JSONOnly: view.jsonOnly}
		f.Fill(reflect.ValueOf(view.r).Elem(), "Reply")
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
	got, err := UnmarshalReply(want)
	if err != nil || !reflect.DeepEqual(got, p.decoded) {
		t.Errorf("%s: JSON round trip: %v; %s", name, err, diffPath(reflect.ValueOf(got), reflect.ValueOf(p.decoded), "Reply"))
	}
	checkRecordPath(t, name, p)
	checkReplyView(t, name, want, &p.r)
}

// checkRecordPath: the request record's form of p.r gives back the reply
// and its JSON (what a retry is answered). A record's booking is keyed by
// its id and calendar, so they are those the writer gives it.
func checkRecordPath(t *testing.T, name string, p filledReplies) {
	t.Helper()
	r := p.r
	if r.Booking != nil {
		bk := *r.Booking
		bk.ID, bk.CalendarID = BookingID(r.CalendarID, r.RequestID), r.CalendarID
		r.Booking = &bk
	}
	rec := data.RequestRecord{Calendar: r.CalendarID, RequestID: r.RequestID, Seq: r.Seq, Reply: AppendRecordReply(nil, &r)}
	got, err := ReplyFromRecord(rec)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Errorf("%s: request record round trip: %v; %s", name, err, diffPath(reflect.ValueOf(got), reflect.ValueOf(r), "Reply"))
	}
	want, _ := json.Marshal(&r)
	if got, err := RecordJSON(rec); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: JSON of the request record: %v\n got %s\nwant %s", name, err, got, want)
	}
}

// replyViewSkips are the Reply fields ReplyView does not carry: no reader
// of replies needs them. A new Reply field goes into ReplyView (and
// ReadReply's scan) or here.
var replyViewSkips = []string{"V", "RequestID", "CalendarID"}

// checkReplyView: ReadReply of raw, r's JSON, gives every field of r that
// the view carries (calendar, booking and conflict as encoded), by the
// scan unless a string needs escapes.
func checkReplyView(t *testing.T, name string, raw []byte, r *Reply) {
	t.Helper()
	var v ReplyView
	if err := ReadReply(raw, &v); err != nil {
		t.Fatalf("%s: ReadReply: %v", name, err)
	}
	var scanned ReplyView
	if !scanReply(raw, &scanned) {
		if !bytes.Contains(raw, []byte(`\`)) {
			t.Errorf("%s: ReadReply's scan does not read %s (a new member must be taught to scanReply)", name, raw)
		}
	} else {
		scanned.ErrorMembers = nil
		if v.ErrorMembers = nil; !reflect.DeepEqual(scanned, v) {
			t.Errorf("%s: scan %+v, ReadReply %+v", name, scanned, v)
		}
	}
	rv, vv := reflect.ValueOf(r).Elem(), reflect.ValueOf(v)
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		if slices.Contains(replyViewSkips, f.Name) {
			continue
		}
		got := vv.FieldByName(f.Name)
		if !got.IsValid() {
			t.Errorf("%s: ReplyView has no field %s (add it, or add it to replyViewSkips)", name, f.Name)
			continue
		}
		want := rv.Field(i).Interface()
		if got.Type() == rawType && f.Type != rawType {
			if rv.Field(i).IsNil() {
				want = json.RawMessage(nil)
			} else {
				b, _ := json.Marshal(want)
				want = json.RawMessage(b)
			}
		}
		if !reflect.DeepEqual(got.Interface(), want) {
			t.Errorf("%s: ReplyView.%s = %v, want %v", name, f.Name, got.Interface(), want)
		}
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
