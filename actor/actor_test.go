package actor_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// t0 is an arbitrary, fixed instant the tests build their times on.
var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func at(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }

// --- command builders ---

func mustJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func upsertCmd(cal, req, name string) string {
	return fmt.Sprintf(`{"v":1,"type":"calendar.upsert","request_id":%q,"calendar_id":%q,"calendar":{"name":%q,"timezone":"Europe/Berlin"}}`, req, cal, name)
}

func bookCmd(cal, req string, start, end time.Time, customer string) string {
	return bookCmdMeta(cal, req, start, end, customer, `{"note":"hi"}`)
}

func bookCmdMeta(cal, req string, start, end time.Time, customer, metadata string) string {
	return fmt.Sprintf(`{"v":1,"type":"booking.create","request_id":%q,"calendar_id":%q,"booking":{"start":%q,"end":%q,"customer":%q,"metadata":%s}}`,
		req, cal, start.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano), customer, metadata)
}

// seriesCmd is a version 3 booking.create of a series: recurrence and
// extra are JSON members of the booking (extra may be "").
func seriesCmd(cal, req string, start, end time.Time, customer, recurrence, extra string) string {
	return fmt.Sprintf(`{"v":3,"type":"booking.create","request_id":%q,"calendar_id":%q,"booking":{"start":%q,"end":%q,"customer":%q,"recurrence":%s%s}}`,
		req, cal, start.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano), customer, recurrence, extra)
}

// cancelFollowingCmd cancels an occurrence and the later ones of its series.
func cancelFollowingCmd(cal, req, bookingID string) string {
	return fmt.Sprintf(`{"v":3,"type":"booking.cancel","request_id":%q,"calendar_id":%q,"booking_id":%q,"scope":"following"}`, req, cal, bookingID)
}

func cancelCmd(cal, req, bookingID string) string {
	return fmt.Sprintf(`{"v":1,"type":"booking.cancel","request_id":%q,"calendar_id":%q,"booking_id":%q}`, req, cal, bookingID)
}

// --- harness ---

// harness feeds one partition's messages to the actor on a real store, the
// way the queue's partition goroutine does: decode, then Apply inside one
// Commit.
type harness struct {
	tb   testing.TB
	s    *data.Store
	part int
	seq  uint64
	log  []actor.Input // what sendAt applied
	// partitions is the stream's partition count its messages carry
	// (actor.Input.Partitions; 0: not set, as no decision but
	// collective.commits needs it).
	partitions int
}

func newHarness(tb testing.TB) *harness {
	tb.Helper()
	return &harness{tb: tb, s: datatest.MustOpen(tb)}
}

// input makes the next message of the partition on the subject of cal.
// Its stream time is t0 + seq seconds.
func (h *harness) input(cal, body string) actor.Input {
	h.seq++
	return actor.Input{Seq: h.seq, At: t0.Add(time.Duration(h.seq) * time.Second), SubjectCalendar: cal, Data: []byte(body),
		Partitions: h.partitions}
}

// decodeNoSkips decodes in for a partition whose log holds no skip.
func decodeNoSkips(in actor.Input) actor.Decoded {
	d := actor.Decode(in)
	if d.SkipCandidate() {
		d.SetSkip(nil)
	}
	return d
}

func applyInputs(tb testing.TB, s *data.Store, part int, ins ...actor.Input) []actor.Output {
	tb.Helper()
	batch := make([]actor.Decoded, len(ins))
	for i, in := range ins {
		batch[i] = decodeNoSkips(in)
	}
	var out []actor.Output
	err := s.Commit(func(tx *data.Tx) error {
		var err error
		out, err = actor.Apply(tx, part, batch)
		return err
	})
	if err != nil {
		tb.Fatalf("apply: %v", err)
	}
	if len(out) != len(ins) {
		tb.Fatalf("%d outputs for %d inputs", len(out), len(ins))
	}
	return out
}

func (h *harness) apply(ins ...actor.Input) []actor.Output {
	h.tb.Helper()
	return applyInputs(h.tb, h.s, h.part, ins...)
}

// send applies one new message and returns its raw and decoded reply.
func (h *harness) send(cal, body string) (actor.Output, actor.Reply) {
	h.tb.Helper()
	out := h.apply(h.input(cal, body))[0]
	return out, decodeReply(h.tb, out.Reply)
}

func decodeReply(tb testing.TB, b []byte) actor.Reply {
	tb.Helper()
	var r actor.Reply
	if err := json.Unmarshal(b, &r); err != nil {
		tb.Fatalf("reply %q: %v", b, err)
	}
	return r
}

func wantCode(tb testing.TB, r actor.Reply, code string) {
	tb.Helper()
	if code == "" {
		if r.Outcome != actor.OutcomeAccepted || r.Code != "" {
			tb.Fatalf("reply %+v, want accepted", r)
		}
		return
	}
	if r.Outcome != actor.OutcomeRejected || r.Code != code {
		tb.Fatalf("reply outcome %q code %q (%s), want rejected %q", r.Outcome, r.Code, r.Message, code)
	}
}

func (h *harness) view(fn func(*data.Tx)) {
	h.tb.Helper()
	if err := h.s.View(func(tx *data.Tx) error { fn(tx); return nil }); err != nil {
		h.tb.Fatal(err)
	}
}

// --- Decode ---

func TestDecodeRejects(t *testing.T) {
	valid := bookCmd("cal1", "r1", at(0), at(60), "Ada")
	tests := []struct {
		name    string
		subject string
		data    string
		code    string
		field   string // expected in Details, if set
	}{
		{"empty", "cal1", ``, actor.CodeInvalidCommand, ""},
		{"bad JSON", "cal1", `{"v":1,`, actor.CodeInvalidCommand, ""},
		{"not an object", "cal1", `[1,2]`, actor.CodeInvalidCommand, ""},
		{"null", "cal1", `null`, actor.CodeInvalidCommand, ""},
		{"wrong field type", "cal1", `{"v":"1","type":"booking.cancel"}`, actor.CodeInvalidCommand, ""},
		{"trailing object", "cal1", valid + ` {}`, actor.CodeInvalidCommand, ""},
		{"trailing brace", "cal1", valid + `}`, actor.CodeInvalidCommand, ""},
		{"trailing bracket", "cal1", valid + "\n]", actor.CodeInvalidCommand, ""},
		{"trailing garbage", "cal1", valid + ` x`, actor.CodeInvalidCommand, ""},
		{"unknown type", "cal1", `{"v":1,"type":"booking.move","request_id":"r1","calendar_id":"cal1"}`, actor.CodeInvalidCommand, "type"},
		{"missing type", "cal1", `{"v":1,"request_id":"r1","calendar_id":"cal1"}`, actor.CodeInvalidCommand, "type"},
		{"version 0", "cal1", strings.Replace(valid, `"v":1`, `"v":0`, 1), actor.CodeInvalidCommand, ""},
		{"version missing", "cal1", strings.Replace(valid, `"v":1,`, ``, 1), actor.CodeInvalidCommand, ""},
		{"version -1", "cal1", strings.Replace(valid, `"v":1`, `"v":-1`, 1), actor.CodeInvalidCommand, ""},
		{"calendar id not the subject", "cal2", valid, actor.CodeInvalidCommand, ""},
		{"calendar id missing", "cal1", strings.Replace(valid, `"calendar_id":"cal1",`, ``, 1), actor.CodeInvalidCommand, ""},
		{"calendar id invalid", "bad.id", bookCmd("bad.id", "r1", at(0), at(60), "Ada"), actor.CodeInvalidRequest, "calendar_id"},
		{"calendar id too long", strings.Repeat("c", 65), bookCmd(strings.Repeat("c", 65), "r1", at(0), at(60), "Ada"), actor.CodeInvalidRequest, "calendar_id"},
		{"request id missing", "cal1", strings.Replace(valid, `"request_id":"r1",`, ``, 1), actor.CodeInvalidCommand, "request_id"},
		{"request id with space", "cal1", bookCmd("cal1", "r 1", at(0), at(60), "Ada"), actor.CodeInvalidCommand, "request_id"},
		{"request id too long", "cal1", bookCmd("cal1", strings.Repeat("r", 129), at(0), at(60), "Ada"), actor.CodeInvalidCommand, "request_id"},
		{"request id non-ASCII", "cal1", bookCmd("cal1", "r\u00e9", at(0), at(60), "Ada"), actor.CodeInvalidCommand, "request_id"},
		{"booking missing", "cal1", `{"v":1,"type":"booking.create","request_id":"r1","calendar_id":"cal1"}`, actor.CodeInvalidRequest, "booking"},
		{"start not a time", "cal1", strings.Replace(valid, at(0).Format(time.RFC3339), "tomorrow", 1), actor.CodeInvalidCommand, ""},
		{"start without zone", "cal1", strings.Replace(valid, at(0).Format(time.RFC3339), "2026-03-02T09:00:00", 1), actor.CodeInvalidCommand, ""},
		{"start missing", "cal1", `{"v":1,"type":"booking.create","request_id":"r1","calendar_id":"cal1","booking":{"end":"2026-03-02T10:00:00Z","customer":"Ada"}}`, actor.CodeInvalidRequest, "start"},
		{"end missing", "cal1", `{"v":1,"type":"booking.create","request_id":"r1","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","customer":"Ada"}}`, actor.CodeInvalidRequest, "end"},
		{"year before 1970", "cal1", bookCmd("cal1", "r1", time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC), time.Date(1969, 12, 31, 23, 30, 0, 0, time.UTC), "Ada"), actor.CodeInvalidRequest, "start"},
		{"year after 2199", "cal1", bookCmd("cal1", "r1", time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2200, 1, 1, 1, 0, 0, 0, time.UTC), "Ada"), actor.CodeInvalidRequest, "end"},
		{"end equals start", "cal1", bookCmd("cal1", "r1", at(0), at(0), "Ada"), actor.CodeInvalidRequest, "end"},
		{"end before start", "cal1", bookCmd("cal1", "r1", at(60), at(0), "Ada"), actor.CodeInvalidRequest, "end"},
		{"end before start across zones", "cal1", bookCmd("cal1", "r1", at(30).In(time.FixedZone("X", -3*3600)), at(0).In(time.FixedZone("Y", 3*3600)), "Ada"), actor.CodeInvalidRequest, "end"},
		{"longer than max duration", "cal1", bookCmd("cal1", "r1", at(0), at(0).Add(actor.MaxBookingDuration+time.Nanosecond), "Ada"), actor.CodeInvalidRequest, "end"},
		{"customer missing", "cal1", bookCmd("cal1", "r1", at(0), at(60), ""), actor.CodeInvalidRequest, "customer"},
		{"customer too long", "cal1", bookCmd("cal1", "r1", at(0), at(60), strings.Repeat("x", actor.MaxCustomerLen+1)), actor.CodeInvalidRequest, "customer"},
		{"customer too long in runes", "cal1", bookCmd("cal1", "r1", at(0), at(60), strings.Repeat("\u00e9", actor.MaxCustomerLen+1)), actor.CodeInvalidRequest, "customer"},
		{"metadata array", "cal1", bookCmdMeta("cal1", "r1", at(0), at(60), "Ada", `[1]`), actor.CodeInvalidRequest, "metadata"},
		{"metadata string", "cal1", bookCmdMeta("cal1", "r1", at(0), at(60), "Ada", `"x"`), actor.CodeInvalidRequest, "metadata"},
		{"metadata number", "cal1", bookCmdMeta("cal1", "r1", at(0), at(60), "Ada", `1`), actor.CodeInvalidRequest, "metadata"},
		{"metadata too large", "cal1", bookCmdMeta("cal1", "r1", at(0), at(60), "Ada", `{"x":"`+strings.Repeat("a", actor.MaxMetadataBytes)+`"}`), actor.CodeInvalidRequest, "metadata"},
		{"oversize", "cal1", bookCmdMeta("cal1", "r1", at(0), at(60), "Ada", `{"x":"`+strings.Repeat("a", actor.MaxCommandBytes)+`"}`), actor.CodeInvalidCommand, ""},
		{"calendar body missing", "cal1", `{"v":1,"type":"calendar.upsert","request_id":"r1","calendar_id":"cal1"}`, actor.CodeInvalidRequest, "calendar"},
		{"bad timezone", "cal1", strings.Replace(upsertCmd("cal1", "r1", "n"), "Europe/Berlin", "Mars/Olympus", 1), actor.CodeInvalidRequest, "timezone"},
		{"Local timezone", "cal1", strings.Replace(upsertCmd("cal1", "r1", "n"), "Europe/Berlin", "Local", 1), actor.CodeInvalidRequest, "timezone"},
		{"path timezone", "cal1", strings.Replace(upsertCmd("cal1", "r1", "n"), "Europe/Berlin", "../../etc/passwd", 1), actor.CodeInvalidRequest, "timezone"},
		{"name too long", "cal1", upsertCmd("cal1", "r1", strings.Repeat("n", actor.MaxNameLen+1)), actor.CodeInvalidRequest, "name"},
		{"cancel bad booking id", "cal1", cancelCmd("cal1", "r1", "not-an-id"), actor.CodeInvalidRequest, "booking_id"},
		{"cancel booking id upper case", "cal1", cancelCmd("cal1", "r1", strings.ToUpper(actor.BookingID("cal1", "x"))), actor.CodeInvalidRequest, "booking_id"},
		{"cancel booking id missing", "cal1", `{"v":1,"type":"booking.cancel","request_id":"r1","calendar_id":"cal1"}`, actor.CodeInvalidRequest, "booking_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.FixedZone("X", 7200))
			d := actor.Decode(actor.Input{Seq: 42, At: at, SubjectCalendar: tt.subject, Data: []byte(tt.data)})
			if d.Reject == nil {
				t.Fatalf("not rejected: %+v", d.Cmd)
			}
			r := d.Reject
			if r.Code != tt.code {
				t.Errorf("code %q (%s %+v), want %q", r.Code, r.Message, r.Details, tt.code)
			}
			if r.Outcome != actor.OutcomeRejected || r.V != actor.SchemaVersion || r.Seq != 42 || r.CalendarID != tt.subject || r.Message == "" {
				t.Errorf("reject envelope %+v", r)
			}
			if d.Seq != 42 || !d.At.Equal(at) || d.At.Location() != time.UTC {
				t.Errorf("decoded Seq %d At %s", d.Seq, d.At)
			}
			if tt.field != "" && !slices.ContainsFunc(r.Details, func(e actor.FieldError) bool { return e.Field == tt.field && e.Message != "" }) {
				t.Errorf("details %+v do not name field %q", r.Details, tt.field)
			}
			if d.Fingerprint != "" {
				t.Errorf("rejected command has fingerprint %q", d.Fingerprint)
			}
		})
	}
}

func TestDecodeValid(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	tests := []struct {
		name  string
		data  string
		check func(t *testing.T, c actor.Command)
	}{
		{"booking normalised", bookCmdMeta("cal1", "r1", at(60).In(berlin), at(120).In(berlin), "Ada", ` { "b" : 1 , "a" : [ 2 , 3 ] } `),
			func(t *testing.T, c actor.Command) {
				b := c.Booking
				if b.Start != at(60) || b.End != at(120) || b.Start.Location() != time.UTC {
					t.Errorf("times not in UTC: %s, %s", b.Start, b.End)
				}
				if string(b.Metadata) != `{"a":[2,3],"b":1}` {
					t.Errorf("metadata %s", b.Metadata)
				}
			}},
		{"metadata absent", strings.Replace(bookCmd("cal1", "r1", at(0), at(60), "Ada"), `,"metadata":{"note":"hi"}`, "", 1),
			func(t *testing.T, c actor.Command) {
				if string(c.Booking.Metadata) != `{}` {
					t.Errorf("metadata %s", c.Booking.Metadata)
				}
			}},
		{"metadata null", bookCmdMeta("cal1", "r1", at(0), at(60), "Ada", `null`),
			func(t *testing.T, c actor.Command) {
				if string(c.Booking.Metadata) != `{}` {
					t.Errorf("metadata %s", c.Booking.Metadata)
				}
			}},
		{"max duration", bookCmd("cal1", "r1", at(0), at(0).Add(actor.MaxBookingDuration), "Ada"), nil},
		{"max customer length in runes", bookCmd("cal1", "r1", at(0), at(60), strings.Repeat("\u00e9", actor.MaxCustomerLen)), nil},
		{"max request id", bookCmd("cal1", strings.Repeat("r", 128), at(0), at(60), "Ada"), nil},
		{"request id punctuation", bookCmd("cal1", "a.b:c-d_e", at(0), at(60), "Ada"), nil},
		{"leading and trailing white space", " \n\t" + bookCmd("cal1", "r1", at(0), at(60), "Ada") + "\r\n ", nil},
		{"unknown fields ignored", strings.Replace(bookCmd("cal1", "r1", at(0), at(60), "Ada"), `{"v":1,`, `{"v":1,"extra":{"x":[1]},`, 1), nil},
		{"default timezone", `{"v":1,"type":"calendar.upsert","request_id":"r1","calendar_id":"cal1","calendar":{"name":"n"}}`,
			func(t *testing.T, c actor.Command) {
				if c.Calendar.Timezone != "UTC" {
					t.Errorf("timezone %q", c.Calendar.Timezone)
				}
			}},
		{"cancel", cancelCmd("cal1", "r1", actor.BookingID("cal1", "r0")), nil},
		{"end after start as instants, not as wall clocks", bookCmd("cal1", "r1", at(0).In(time.FixedZone("X", 3*3600)), at(30).In(time.FixedZone("Y", -3*3600)), "Ada"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := actor.Decode(actor.Input{Seq: 1, At: t0, SubjectCalendar: "cal1", Data: []byte(tt.data)})
			if d.Reject != nil {
				t.Fatalf("rejected: %s %s %+v", d.Reject.Code, d.Reject.Message, d.Reject.Details)
			}
			if d.Fingerprint == "" {
				t.Error("no fingerprint")
			}
			if tt.check != nil {
				tt.check(t, d.Cmd)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	fp := func(cal, data string) string {
		t.Helper()
		d := actor.Decode(actor.Input{Seq: 1, At: t0, SubjectCalendar: cal, Data: []byte(data)})
		if d.Reject != nil {
			t.Fatalf("rejected: %+v", d.Reject)
		}
		return d.Fingerprint
	}
	base := fp("cal1", bookCmdMeta("cal1", "r1", at(0), at(60), "Ada", `{"a":2,"b":1}`))
	same := []string{
		bookCmdMeta("cal1", "r2", at(0), at(60), "Ada", `{"a":2,"b":1}`), // request id is not part of it
		bookCmdMeta("cal1", "r1", at(0).In(time.FixedZone("X", 5400)), at(60).In(time.FixedZone("Y", -3600)), "Ada", `{"b":1, "a":2}`),
		" " + strings.ReplaceAll(bookCmdMeta("cal1", "r1", at(0), at(60), "Ada", `{"a":2,"b":1}`), ",", " ,\n "),
	}
	for _, s := range same {
		if got := fp("cal1", s); got != base {
			t.Errorf("fingerprint of %s differs", s)
		}
	}
	different := []string{
		bookCmdMeta("cal1", "r1", at(0), at(61), "Ada", `{"a":2,"b":1}`),
		bookCmdMeta("cal1", "r1", at(0), at(60), "Bob", `{"a":2,"b":1}`),
		bookCmdMeta("cal1", "r1", at(0), at(60), "Ada", `{"a":2,"b":1.0}`),
		bookCmdMeta("cal1", "r1", at(0), at(60), "Ada", `{"a":2}`),
	}
	for _, s := range different {
		if got := fp("cal1", s); got == base {
			t.Errorf("fingerprint of %s equals the base", s)
		}
	}
	if fp("cal2", bookCmdMeta("cal2", "r1", at(0), at(60), "Ada", `{"a":2,"b":1}`)) == base {
		t.Error("fingerprint does not depend on the calendar")
	}
}

func TestCanonicalMetadata(t *testing.T) {
	tests := []struct{ in, want string }{
		{``, `{}`},
		{`null`, `{}`},
		{`  null `, `{}`},
		{`{}`, `{}`},
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{`{"a":2, "b":1}`, `{"a":2,"b":1}`},
		{`{"big":123456789012345678901234567890,"f":1.50,"e":1e400}`, `{"big":123456789012345678901234567890,"e":1e400,"f":1.50}`},
		{`{"n":{"z":true,"y":[{"b":null,"a":"<&>"}]}}`, `{"n":{"y":[{"a":"\u003c\u0026\u003e","b":null}],"z":true}}`},
	}
	for _, tt := range tests {
		got, err := actor.CanonicalMetadata(json.RawMessage(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("CanonicalMetadata(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	a, _ := actor.CanonicalMetadata(json.RawMessage(`{"b":1,"a":2}`))
	b, _ := actor.CanonicalMetadata(json.RawMessage(`{"a":2, "b":1}`))
	if !bytes.Equal(a, b) {
		t.Errorf("%s != %s", a, b)
	}
	for _, bad := range []string{`[]`, `"x"`, `1`, `true`, `{`, `{"a":1}}`, `{"a":1}]`, `{"a":1} {}`, `{"a":1} x`, `{"a":01}`,
		`{"x":"` + strings.Repeat("a", actor.MaxMetadataBytes) + `"}`} {
		if got, err := actor.CanonicalMetadata(json.RawMessage(bad)); err == nil {
			t.Errorf("CanonicalMetadata(%.40s) = %s, want an error", bad, got)
		}
	}
}

var bookingIDShape = regexp.MustCompile(`^[0-9a-v]{26}$`)

func TestBookingID(t *testing.T) {
	seen := map[string]bool{}
	for _, cal := range []string{"cal1", "cal2", "a"} {
		for _, req := range []string{"r1", "r2", "1", "a.b:c"} {
			id := actor.BookingID(cal, req)
			if !bookingIDShape.MatchString(id) || !actor.ValidBookingID(id) {
				t.Errorf("BookingID(%s, %s) = %q", cal, req, id)
			}
			if id != actor.BookingID(cal, req) {
				t.Errorf("BookingID(%s, %s) is not deterministic", cal, req)
			}
			if seen[id] {
				t.Errorf("BookingID(%s, %s) = %q collides", cal, req, id)
			}
			seen[id] = true
		}
	}
	// The separator keeps ("a", "b.c") and ("a.b"...) style splits apart.
	if actor.BookingID("ab", "c") == actor.BookingID("a", "bc") {
		t.Error("BookingID ignores where the calendar id ends")
	}
}

// --- Apply ---

func TestCalendarUpsert(t *testing.T) {
	h := newHarness(t)
	h.send("cal0", upsertCmd("cal0", "u0", "Other"))         // seq 1
	_, r := h.send("cal1", upsertCmd("cal1", "u0", "First")) // seq 2
	wantCode(t, r, "")
	if !r.Created || r.Calendar == nil || r.Type != actor.TypeCalendarUpsert || r.RequestID != "u0" || r.CalendarID != "cal1" || r.Seq != 2 {
		t.Fatalf("first upsert reply %+v", r)
	}
	created := r.Calendar.CreatedAt
	if !created.Equal(t0.Add(2*time.Second)) || !r.Calendar.UpdatedAt.Equal(created) {
		t.Errorf("created_at %s updated_at %s, want the message time", created, r.Calendar.UpdatedAt)
	}
	if r.Calendar.Name != "First" || r.Calendar.Timezone != "Europe/Berlin" || r.Calendar.ID != "cal1" {
		t.Errorf("calendar %+v", r.Calendar)
	}

	_, r = h.send("cal1", upsertCmd("cal1", "u2", "Second")) // seq 3
	wantCode(t, r, "")
	if r.Created {
		t.Error("second upsert says created")
	}
	if !r.Calendar.CreatedAt.Equal(created) || !r.Calendar.UpdatedAt.Equal(t0.Add(3*time.Second)) || r.Calendar.Name != "Second" {
		t.Errorf("updated calendar %+v", r.Calendar)
	}
	h.view(func(tx *data.Tx) {
		c, err := tx.Calendar("cal1")
		if err != nil || mustJSON(t, c) != mustJSON(t, r.Calendar) {
			t.Errorf("stored calendar %+v, %v; reply %+v", c, err, r.Calendar)
		}
	})
}

func TestBookingOnMissingCalendar(t *testing.T) {
	h := newHarness(t)
	_, r := h.send("nope", bookCmd("nope", "r1", at(0), at(60), "Ada"))
	wantCode(t, r, actor.CodeCalendarNotFound)
	_, r = h.send("nope", cancelCmd("nope", "r2", actor.BookingID("nope", "r1")))
	wantCode(t, r, actor.CodeCalendarNotFound)
	// The rejection is recorded: a retry after the calendar was created
	// still gets it (an idempotency key answers its first request forever).
	h.send("nope", upsertCmd("nope", "u1", "n"))
	out, r := h.send("nope", bookCmd("nope", "r1", at(0), at(60), "Ada"))
	wantCode(t, r, actor.CodeCalendarNotFound)
	if r.Seq != 1 {
		t.Errorf("retry reply seq %d, want the original 1 (%s)", r.Seq, out.Reply)
	}
	h.view(func(tx *data.Tx) {
		if _, err := tx.Booking("nope", actor.BookingID("nope", "r1")); !errors.Is(err, data.ErrNotFound) {
			t.Errorf("booking stored: %v", err)
		}
	})
}

func TestBookingOverlap(t *testing.T) {
	h := newHarness(t)
	h.send("cal1", upsertCmd("cal1", "u1", "n"))
	h.send("cal2", upsertCmd("cal2", "u1", "n"))
	_, r := h.send("cal1", bookCmd("cal1", "b1", at(60), at(120), "Ada"))
	wantCode(t, r, "")
	if r.Booking == nil || r.Booking.ID != actor.BookingID("cal1", "b1") || r.Booking.Status != data.StatusConfirmed {
		t.Fatalf("booking reply %+v", r.Booking)
	}
	tests := []struct {
		name       string
		start, end int
		ok         bool
	}{
		{"identical", 60, 120, false},
		{"contained", 70, 80, false},
		{"containing", 0, 180, false},
		{"partial left", 30, 61, false},
		{"partial right", 119, 180, false},
		{"touching before", 0, 60, true},
		{"touching after", 120, 180, true},
	}
	for i, tt := range tests {
		_, r := h.send("cal1", bookCmd("cal1", fmt.Sprintf("t%d", i), at(tt.start), at(tt.end), "Bob"))
		if tt.ok {
			wantCode(t, r, "")
			continue
		}
		wantCode(t, r, actor.CodeSlotTaken)
		if r.Conflict == nil || !r.Conflict.Start.Equal(at(60)) || !r.Conflict.End.Equal(at(120)) {
			t.Errorf("%s: conflict %+v, want [60, 120)", tt.name, r.Conflict)
		}
		if r.Booking != nil {
			t.Errorf("%s: rejected reply carries a booking", tt.name)
		}
	}
	// Another calendar is independent.
	_, r = h.send("cal2", bookCmd("cal2", "b1", at(60), at(120), "Ada"))
	wantCode(t, r, "")
}

// TestSameSlotRace has many writers (one per partition, all on one calendar,
// which the queue never does) book the same hour through concurrent group
// commits: the store serialises them and exactly one wins.
func TestSameSlotRace(t *testing.T) {
	s := datatest.MustOpen(t)
	applyInputs(t, s, 99, actor.Input{Seq: 1, At: t0, SubjectCalendar: "cal1", Data: []byte(upsertCmd("cal1", "u1", "n"))})
	const n = 32
	replies := make(chan actor.Reply, n)
	start := make(chan struct{})
	for i := range n {
		go func() {
			<-start
			body := bookCmd("cal1", fmt.Sprintf("r%d", i), at(i%4*10), at(60+i%3*10), fmt.Sprintf("c%d", i))
			d := actor.Decode(actor.Input{Seq: 1, At: t0, SubjectCalendar: "cal1", Data: []byte(body)})
			var out []actor.Output
			err := s.Commit(func(tx *data.Tx) error {
				var err error
				out, err = actor.Apply(tx, i, []actor.Decoded{d})
				return err
			})
			if err != nil {
				t.Error(err)
				replies <- actor.Reply{}
				return
			}
			var r actor.Reply
			_ = json.Unmarshal(out[0].Reply, &r)
			replies <- r
		}()
	}
	close(start)
	won := 0
	for range n {
		r := <-replies
		switch r.Code {
		case "":
			won++
		case actor.CodeSlotTaken:
		default:
			t.Errorf("reply %+v", r)
		}
	}
	if won != 1 {
		t.Errorf("%d winners, want 1", won)
	}
}

func TestCancel(t *testing.T) {
	h := newHarness(t)
	h.send("cal1", upsertCmd("cal1", "u1", "n"))
	_, r := h.send("cal1", bookCmd("cal1", "b1", at(60), at(120), "Ada"))
	id := r.Booking.ID

	out1, r := h.send("cal1", cancelCmd("cal1", "c1", id)) // seq 3
	wantCode(t, r, "")
	if r.Booking == nil || r.Booking.Status != data.StatusCancelled || r.Booking.CancelledAt == nil || !r.Booking.CancelledAt.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("cancel reply booking %+v", r.Booking)
	}
	cancelled := r.Booking

	// Same request again: the identical reply, byte for byte.
	out2, _ := h.send("cal1", cancelCmd("cal1", "c1", id))
	if !bytes.Equal(out1.Reply, out2.Reply) {
		t.Errorf("repeated cancel reply\n%s\nwant\n%s", out2.Reply, out1.Reply)
	}
	// Another request cancelling it again: accepted, same booking state
	// (cancelled_at of the first cancel).
	_, r = h.send("cal1", cancelCmd("cal1", "c2", id))
	wantCode(t, r, "")
	if mustJSON(t, r.Booking) != mustJSON(t, cancelled) {
		t.Errorf("second cancel booking %+v, want %+v", r.Booking, cancelled)
	}

	// The slot is free again.
	_, r = h.send("cal1", bookCmd("cal1", "b2", at(60), at(120), "Bob"))
	wantCode(t, r, "")

	// Unknown booking, and a booking of another calendar.
	_, r = h.send("cal1", cancelCmd("cal1", "c3", actor.BookingID("cal1", "never")))
	wantCode(t, r, actor.CodeBookingNotFound)
	h.send("cal2", upsertCmd("cal2", "u1", "n"))
	_, r = h.send("cal2", cancelCmd("cal2", "c1", actor.BookingID("cal1", "b2")))
	wantCode(t, r, actor.CodeBookingNotFound)
	h.view(func(tx *data.Tx) {
		if bk, err := tx.Booking("cal1", actor.BookingID("cal1", "b2")); err != nil || bk.Status != data.StatusConfirmed {
			t.Errorf("cancel on another calendar touched the booking: %+v, %v", bk, err)
		}
	})
}

func TestIdempotentRetry(t *testing.T) {
	h := newHarness(t)
	h.send("cal1", upsertCmd("cal1", "u1", "n"))
	body := bookCmdMeta("cal1", "r1", at(60), at(120), "Ada", `{"b":1,"a":2}`)
	first, r := h.send("cal1", body)
	wantCode(t, r, "")

	// Retry in a later batch, reformatted (other zone, key order, spaces).
	retry := bookCmdMeta("cal1", "r1", at(60).In(time.FixedZone("X", 3600)), at(120), "Ada", `{ "a":2, "b":1 }`)
	out, _ := h.send("cal1", retry)
	if !bytes.Equal(out.Reply, first.Reply) || out.Skipped {
		t.Errorf("retry reply\n%s\nwant\n%s", out.Reply, first.Reply)
	}
	// Retry in the same batch as the original.
	outs := h.apply(h.input("cal1", bookCmd("cal1", "r9", at(300), at(360), "Eve")), h.input("cal1", bookCmd("cal1", "r9", at(300), at(360), "Eve")))
	if !bytes.Equal(outs[0].Reply, outs[1].Reply) {
		t.Errorf("retry in the same batch\n%s\nwant\n%s", outs[1].Reply, outs[0].Reply)
	}
	// A rejected request's retry gets the rejection, even when the slot
	// has been freed since.
	slotTaken, r := h.send("cal1", bookCmd("cal1", "r2", at(90), at(150), "Bob"))
	wantCode(t, r, actor.CodeSlotTaken)
	h.send("cal1", cancelCmd("cal1", "c1", actor.BookingID("cal1", "r1")))
	out, _ = h.send("cal1", bookCmd("cal1", "r2", at(90), at(150), "Bob"))
	if !bytes.Equal(out.Reply, slotTaken.Reply) {
		t.Errorf("retry of a rejected request\n%s\nwant\n%s", out.Reply, slotTaken.Reply)
	}
}

func TestIdempotencyKeyReused(t *testing.T) {
	h := newHarness(t)
	h.send("cal1", upsertCmd("cal1", "u1", "n"))
	first, _ := h.send("cal1", bookCmd("cal1", "r1", at(60), at(120), "Ada"))
	var before string
	h.view(func(tx *data.Tx) {
		rec, _, _ := tx.Request("cal1", "r1")
		bk, _ := tx.Booking("cal1", actor.BookingID("cal1", "r1"))
		before = recordString(t, rec) + mustJSON(t, bk)
	})
	reuses := []string{
		bookCmd("cal1", "r1", at(60), at(121), "Ada"),     // other interval
		bookCmd("cal1", "r1", at(600), at(660), "Ada"),    // a free slot
		bookCmd("cal1", "r1", at(60), at(120), "Someone"), // other customer
		cancelCmd("cal1", "r1", actor.BookingID("cal1", "r1")),
		upsertCmd("cal1", "r1", "n"),
	}
	for _, body := range reuses {
		out, r := h.send("cal1", body)
		wantCode(t, r, actor.CodeIdempotencyKeyReused)
		if r.Seq != h.seq || r.RequestID != "r1" {
			t.Errorf("reply %+v", r)
		}
		// Deterministic: a redelivery of the reused-key message answers the
		// same bytes.
		again := h.apply(actor.Input{Seq: h.seq, At: t0.Add(time.Duration(h.seq) * time.Second), SubjectCalendar: "cal1", Data: []byte(body)})[0]
		if !again.Skipped || !bytes.Equal(again.Reply, out.Reply) {
			t.Errorf("redelivered reused key: %+v", again)
		}
	}
	h.view(func(tx *data.Tx) {
		rec, _, _ := tx.Request("cal1", "r1")
		bk, _ := tx.Booking("cal1", actor.BookingID("cal1", "r1"))
		if after := recordString(t, rec) + mustJSON(t, bk); after != before {
			t.Errorf("original record changed:\n%s\nwas\n%s", after, before)
		}
		tx.SlotsNear("cal1", at(600), at(660), func(s data.SlotEntry) bool {
			t.Errorf("a reused key booked a slot: %+v", s)
			return false
		})
	})
	// The original request still gets its reply.
	out, _ := h.send("cal1", bookCmd("cal1", "r1", at(60), at(120), "Ada"))
	if !bytes.Equal(out.Reply, first.Reply) {
		t.Errorf("original retry\n%s\nwant\n%s", out.Reply, first.Reply)
	}
}

// TestInvalidCommandConsumesNoKey: an invalid command is answered, not
// recorded, so the corrected command under the same request id (the
// client's retry after fixing its request) is decided normally.
func TestInvalidCommandConsumesNoKey(t *testing.T) {
	h := newHarness(t)
	h.send("cal1", upsertCmd("cal1", "u1", "n"))
	bad := bookCmd("cal1", "r1", at(60), at(60), "Ada") // end == start
	out, r := h.send("cal1", bad)
	wantCode(t, r, actor.CodeInvalidRequest)
	h.view(func(tx *data.Tx) {
		if rec, ok, err := tx.Request("cal1", "r1"); ok || err != nil {
			t.Errorf("an invalid request was recorded: %s, %v", recordString(t, rec), err)
		}
	})
	// The same invalid command again: the same rejection, computed again.
	again, _ := h.send("cal1", bad)
	if r2 := decodeReply(t, again.Reply); r2.Code != r.Code || r2.Message != r.Message || r2.Seq != h.seq {
		t.Errorf("second invalid command: %s, first %s", again.Reply, out.Reply)
	}
	// The corrected body under the same key is a new request.
	fixed, r := h.send("cal1", bookCmd("cal1", "r1", at(60), at(120), "Ada"))
	wantCode(t, r, "")
	if retry, _ := h.send("cal1", bookCmd("cal1", "r1", at(60), at(120), "Ada")); !bytes.Equal(retry.Reply, fixed.Reply) {
		t.Errorf("retry of the corrected request\n%s\nwant\n%s", retry.Reply, fixed.Reply)
	}
	// An invalid command never overwrites an earlier decided outcome.
	_, r = h.send("cal1", bookCmd("cal1", "r1", at(60), at(30), "Ada"))
	wantCode(t, r, actor.CodeInvalidRequest)
	h.view(func(tx *data.Tx) {
		rec, _, _ := tx.Request("cal1", "r1")
		if !bytes.Equal(recordJSON(t, rec), fixed.Reply) {
			t.Errorf("record overwritten by an invalid command: %s", recordJSON(t, rec))
		}
	})
	// Garbage and a command for another calendar leave no record and no
	// calendar behind.
	h.send("cal1", `{"v":1,`)
	h.send("cal1", bookCmd("cal2", "r3", at(0), at(10), "Ada"))
	h.view(func(tx *data.Tx) {
		if _, ok, _ := tx.Request("cal2", "r3"); ok {
			t.Error("a command on the wrong subject was recorded under its calendar id")
		}
		if ids := tx.CalendarIDs(); !slices.Equal(ids, []string{"cal1"}) {
			t.Errorf("calendars %v", ids)
		}
	})
}

func TestRedelivery(t *testing.T) {
	h := newHarness(t)
	ins := []actor.Input{
		h.input("cal1", upsertCmd("cal1", "u1", "n")),
		h.input("cal1", bookCmd("cal1", "r1", at(60), at(120), "Ada")),
		h.input("cal1", bookCmd("cal1", "r2", at(90), at(150), "Bob")), // slot taken
		h.input("cal1", cancelCmd("cal1", "c1", actor.BookingID("cal1", "r1"))),
		h.input("cal1", `garbage`),                                                          // invalid, no request id
		h.input("cal1", bookCmd("cal1", "r3", at(0), at(0), "Eve")),                         // invalid, not recorded
		h.input("cal1", bookCmd("cal1", "r1", at(60), at(121), "Ada")),                      // key reused
		h.input("cal1", bookCmd("cal1", "r4", at(90), at(150), "Bob")),                      // now free
		h.input("cal2", bookCmd("cal2", "r5", at(90), at(150), "Bob")),                      // no calendar
		h.input("cal1", strings.Replace(upsertCmd("cal1", "u2", "n"), `"v":1`, `"v":0`, 1)), // no such schema
	}
	first := h.apply(ins...)
	dump := dumpStore(t, h.s, ins)
	// Whole batch again, then each message alone, then a mix with new ones.
	again := h.apply(ins...)
	for i := range ins {
		if !again[i].Skipped || !bytes.Equal(again[i].Reply, first[i].Reply) || again[i].Seq != ins[i].Seq {
			t.Errorf("redelivered seq %d: skipped %v reply\n%s\nwant\n%s", ins[i].Seq, again[i].Skipped, again[i].Reply, first[i].Reply)
		}
		if again[i].Reply == nil {
			t.Errorf("redelivered seq %d: no reply", ins[i].Seq)
		}
		one := h.apply(ins[i])[0]
		if !one.Skipped || !bytes.Equal(one.Reply, first[i].Reply) {
			t.Errorf("redelivered seq %d alone: %+v", ins[i].Seq, one)
		}
	}
	if got := dumpStore(t, h.s, ins); got != dump {
		t.Errorf("redelivery changed the index:\n%s\nwas\n%s", got, dump)
	}
	// New message mixed with redeliveries: only it is applied, and the
	// applied sequence is its sequence even though an older one comes last.
	next := h.input("cal1", bookCmd("cal1", "r6", at(300), at(360), "Zed"))
	outs := h.apply(ins[1], next, ins[3])
	if outs[0].Skipped != true || outs[1].Skipped || !outs[2].Skipped {
		t.Errorf("skipped flags %v %v %v", outs[0].Skipped, outs[1].Skipped, outs[2].Skipped)
	}
	wantCode(t, decodeReply(t, outs[1].Reply), "")
	h.view(func(tx *data.Tx) {
		if got := tx.AppliedSeq(h.part); got != next.Seq {
			t.Errorf("applied seq %d, want %d", got, next.Seq)
		}
	})
}

func TestAppliedSeq(t *testing.T) {
	h := newHarness(t)
	h.part = 3
	mk := func(seq uint64, body string) actor.Input {
		return actor.Input{Seq: seq, At: t0.Add(time.Duration(seq) * time.Second), SubjectCalendar: "cal1", Data: []byte(body)}
	}
	// Sequences need not be contiguous (other subjects share the stream).
	last := mk(9, bookCmd("cal1", "r1", at(0), at(10), "A"))
	h.apply(mk(5, upsertCmd("cal1", "u1", "n")), mk(6, `junk`), last)
	wantHash := actor.MessageHash(last)
	checkHash := func() {
		t.Helper()
		h.view(func(tx *data.Tx) {
			if seq, hash := tx.AppliedMsg(3); seq != 9 || !bytes.Equal(hash, wantHash) {
				t.Errorf("applied %d with hash %x, want 9 with the hash of that message %x", seq, hash, wantHash)
			}
		})
	}
	h.view(func(tx *data.Tx) {
		if got := tx.AppliedSeq(3); got != 9 {
			t.Errorf("applied seq %d, want 9", got)
		}
		if got := tx.AppliedSeq(0); got != 0 {
			t.Errorf("other partition's applied seq %d", got)
		}
	})
	checkHash()
	// Another message at the same sequence (same body, stored later) has
	// another hash.
	if other := mk(9, bookCmd("cal1", "r1", at(0), at(10), "A")); bytes.Equal(actor.MessageHash(actor.Input{Seq: 9, At: other.At.Add(time.Nanosecond), SubjectCalendar: other.SubjectCalendar, Data: other.Data}), wantHash) {
		t.Error("the hash ignores the stream timestamp")
	}
	// An older message that was never applied (seq <= applied) is taken as
	// a redelivery and not applied.
	out := h.apply(mk(7, bookCmd("cal1", "r7", at(100), at(110), "A")))[0]
	if !out.Skipped || out.Reply != nil {
		t.Errorf("unseen old message: %+v", out)
	}
	h.view(func(tx *data.Tx) {
		if _, err := tx.Booking("cal1", actor.BookingID("cal1", "r7")); !errors.Is(err, data.ErrNotFound) {
			t.Errorf("old message applied: %v", err)
		}
	})
	checkHash() // a batch of redeliveries keeps the hash of what was applied
	// An empty batch changes nothing.
	h.apply()
	h.view(func(tx *data.Tx) {
		if got := tx.AppliedSeq(3); got != 9 {
			t.Errorf("applied seq %d after an empty batch", got)
		}
	})
	checkHash()
}

func TestMessageTimeIsNow(t *testing.T) {
	h := newHarness(t)
	when := time.Date(2001, 2, 3, 4, 5, 6, 789, time.FixedZone("X", -5*3600))
	in := func(seq uint64, body string) actor.Input {
		return actor.Input{Seq: seq, At: when.Add(time.Duration(seq) * time.Hour), SubjectCalendar: "cal1", Data: []byte(body)}
	}
	outs := h.apply(in(1, upsertCmd("cal1", "u1", "n")), in(2, bookCmd("cal1", "r1", at(0), at(60), "A")), in(3, cancelCmd("cal1", "c1", actor.BookingID("cal1", "r1"))))
	cal := decodeReply(t, outs[0].Reply).Calendar
	bk := decodeReply(t, outs[1].Reply).Booking
	cancelled := decodeReply(t, outs[2].Reply).Booking
	if !cal.CreatedAt.Equal(when.Add(time.Hour)) || !bk.CreatedAt.Equal(when.Add(2*time.Hour)) || !cancelled.CancelledAt.Equal(when.Add(3*time.Hour)) {
		t.Errorf("times: calendar %s, booking %s, cancelled %s", cal.CreatedAt, bk.CreatedAt, cancelled.CancelledAt)
	}
	if !strings.Contains(string(outs[1].Reply), `"created_at":"2001-02-03T11:05:06.000000789Z"`) {
		t.Errorf("created_at not the message time in UTC: %s", outs[1].Reply)
	}
	if bk.ID != actor.BookingID("cal1", "r1") || !bookingIDShape.MatchString(bk.ID) {
		t.Errorf("booking id %q", bk.ID)
	}
}

func TestBookingStoredAsReplied(t *testing.T) {
	h := newHarness(t)
	h.send("cal1", upsertCmd("cal1", "u1", "n"))
	_, r := h.send("cal1", bookCmdMeta("cal1", "r1", at(60), at(120), "Ada", `{"z":12345678901234567890123,"a":[1,{"y":1,"x":2}]}`))
	if string(r.Booking.Metadata) != `{"a":[1,{"x":2,"y":1}],"z":12345678901234567890123}` {
		t.Errorf("metadata %s", r.Booking.Metadata)
	}
	h.view(func(tx *data.Tx) {
		bk, err := tx.Booking("cal1", r.Booking.ID)
		if err != nil || mustJSON(t, bk) != mustJSON(t, r.Booking) {
			t.Errorf("stored %+v, %v; replied %+v", bk, err, r.Booking)
		}
		bks, _, _ := tx.ListBookings("cal1", at(0), at(1000), 10, nil)
		if len(bks) != 1 || bks[0].ID != r.Booking.ID {
			t.Errorf("listed %+v", bks)
		}
	})
}

// --- store dump ---

var (
	minTime = time.Unix(0, -1<<63)
	maxTime = time.Unix(0, 1<<63-1)
)

// dumpStore renders everything the actor could have written: calendars,
// booking records (cancelled included), the confirmed listing, the request
// records of every (subject, request id) in msgs, and the applied sequence
// of the partitions used.
func dumpStore(tb testing.TB, s *data.Store, msgs []actor.Input) string {
	tb.Helper()
	var b strings.Builder
	err := s.View(func(tx *data.Tx) error {
		for _, cal := range tx.CalendarIDs() {
			c, err := tx.Calendar(cal)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "calendar %s\n", mustJSON(tb, c))
			if err := tx.ForEachBooking(cal, func(bk data.Booking) error {
				fmt.Fprintf(&b, "  booking %s\n", mustJSON(tb, bk))
				return nil
			}); err != nil {
				return err
			}
			bks, next, err := tx.ListBookings(cal, minTime, maxTime, 0, nil)
			if err != nil || next != nil {
				return fmt.Errorf("list %s: %v, next %x", cal, err, next)
			}
			for _, bk := range bks {
				fmt.Fprintf(&b, "  listed %s [%s, %s)\n", bk.ID, bk.Start.Format(time.RFC3339Nano), bk.End.Format(time.RFC3339Nano))
			}
		}
		seen := map[string]bool{}
		var keys []string
		for _, in := range msgs {
			var env struct {
				RequestID string `json:"request_id"`
			}
			_ = json.Unmarshal(in.Data, &env)
			k := in.SubjectCalendar + "\x00" + env.RequestID
			if env.RequestID != "" && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			cal, req, _ := strings.Cut(k, "\x00")
			rec, ok, err := tx.Request(cal, req)
			if err != nil {
				return err
			}
			if ok {
				fmt.Fprintf(&b, "request %s/%s %s\n", cal, req, recordString(tb, rec))
			}
		}
		for p := range 4 {
			fmt.Fprintf(&b, "applied %d %d, log now %s\n", p, tx.AppliedSeq(p), tx.LogNow(p).Format(time.RFC3339Nano))
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("dump: %v", err)
	}
	return b.String()
}

// --- determinism ---

// logMsg is one generated message, with what the model needs to know.
type logMsg struct {
	in        actor.Input
	kind      string // "upsert", "create", "cancel", "hold", "confirm" or "other"
	cal       string
	iv        data.Interval
	bookingID string
	ttl       time.Duration // holds
	recordTTL int           // record_ttl_seconds, 0 = none
}

// genLog generates a random command log over a few calendars: upserts,
// bookings and holds on a 15-minute grid lasting 15 to 120 minutes, hold
// confirmations, cancels of earlier (and unknown) booking ids, request ids
// reused with the same and with other bodies, and invalid messages of many
// kinds. Stream timestamps mostly advance, but the clock sometimes steps
// back by up to two minutes (a new stream leader, a clock correction). A
// third of the valid commands ask for a record retention of 20 s to 10 min
// (the log spans about 50 min), so records expire and their request ids
// come back.
func genLog(seed uint64, n int) []logMsg {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cals := []string{"c0", "c1", "c2"}
	var (
		log     []logMsg
		valid   []logMsg // decodable commands, for reusing their request ids
		creates []logMsg // bookings and holds
		holds   []logMsg
		clock   = t0
	)
	add := func(m logMsg) {
		seq := uint64(len(log) + 1)
		m.in.Seq = seq
		// Stream time: not on a round grid, and not always increasing.
		clock = clock.Add(1500*time.Millisecond + time.Duration(r.IntN(1000))*time.Microsecond)
		if r.IntN(60) == 0 {
			clock = clock.Add(-time.Duration(r.IntN(120_000)) * time.Millisecond)
		}
		m.in.At = clock
		if m.kind != "other" && m.recordTTL == 0 && r.IntN(3) == 0 {
			m.recordTTL = 20 + r.IntN(600)
			m.in.Data = []byte(withTTL(string(m.in.Data), m.recordTTL))
		}
		log = append(log, m)
		if m.kind != "other" {
			valid = append(valid, m)
		}
		if m.kind == "create" || m.kind == "hold" {
			creates = append(creates, m)
		}
		if m.kind == "hold" {
			holds = append(holds, m)
		}
	}
	pickCal := func() string {
		if r.IntN(30) == 0 {
			return "ghost" // never created
		}
		return cals[r.IntN(len(cals))]
	}
	create := func(cal, req string) logMsg {
		start := at(15 * r.IntN(4*24*3)) // three days
		end := start.Add(time.Duration(15*(1+r.IntN(8))) * time.Minute)
		md := []string{`{}`, `null`, `{"b":1,"a":2}`, `{"a":2, "b":1}`, `{"n":123456789012345678901234567890}`}[r.IntN(5)]
		zone := time.FixedZone("Z", 3600*(r.IntN(5)-2))
		body := bookCmdMeta(cal, req, start.In(zone), end, fmt.Sprintf("cust%d", r.IntN(50)), md)
		return logMsg{in: actor.Input{SubjectCalendar: cal, Data: []byte(body)}, kind: "create", cal: cal,
			iv: data.Interval{Start: start, End: end}, bookingID: actor.BookingID(cal, req)}
	}
	cancel := func(cal, req, id string) logMsg {
		return logMsg{in: actor.Input{SubjectCalendar: cal, Data: []byte(cancelCmd(cal, req, id))}, kind: "cancel", cal: cal, bookingID: id}
	}
	hold := func(cal, req string) logMsg {
		m := create(cal, req)
		m.kind, m.ttl = "hold", time.Duration(15*(1+r.IntN(12)))*time.Second
		body := strings.Replace(string(m.in.Data), `"type":"booking.create"`, `"type":"hold.create"`, 1)
		m.in.Data = []byte(strings.Replace(body, `"customer":`, fmt.Sprintf(`"ttl_seconds":%d,"customer":`, int(m.ttl/time.Second)), 1))
		return m
	}
	confirm := func(cal, req, id string) logMsg {
		body := fmt.Sprintf(`{"v":1,"type":"hold.confirm","request_id":%q,"calendar_id":%q,"booking_id":%q}`, req, cal, id)
		return logMsg{in: actor.Input{SubjectCalendar: cal, Data: []byte(body)}, kind: "confirm", cal: cal, bookingID: id}
	}
	upsert := func(cal, req string) logMsg {
		return logMsg{in: actor.Input{SubjectCalendar: cal, Data: []byte(upsertCmd(cal, req, fmt.Sprintf("name %d", r.IntN(9))))}, kind: "upsert", cal: cal}
	}
	add(upsert("c0", "u-init0"))
	add(upsert("c1", "u-init1"))
	for i := len(log); i < n; i++ {
		req := fmt.Sprintf("q%04d", i)
		switch x := r.IntN(100); {
		case x < 4:
			add(upsert(pickCal(), req))
		case x < 45:
			add(create(pickCal(), req))
		case x < 52:
			add(hold(pickCal(), req))
		case x < 56:
			if len(holds) > 0 && r.IntN(5) > 0 {
				c := holds[max(0, len(holds)-1-r.IntN(20))] // recent ones: live or expired
				add(confirm(c.cal, req, c.bookingID))
			} else if len(creates) > 0 {
				c := creates[r.IntN(len(creates))]
				add(confirm(c.cal, req, c.bookingID))
			} else {
				add(confirm(pickCal(), req, actor.BookingID("c0", "never"+req)))
			}
		case x < 58:
			// What the hold expirer publishes: sometimes early (its clock
			// ahead of the stream's), mostly for an expiry already due.
			target := clock.Add(time.Duration(r.IntN(90_000)-70_000) * time.Millisecond)
			cal := pickCal()
			body := fmt.Sprintf(`{"v":1,"type":"hold.expire","request_id":%q,"calendar_id":%q}`, actor.ExpireRequestID(target), cal)
			add(logMsg{in: actor.Input{SubjectCalendar: cal, Data: []byte(body)}, kind: "expire", cal: cal,
				iv: data.Interval{Start: target, End: target}})
		case x < 72:
			if len(creates) > 0 && r.IntN(6) > 0 {
				c := creates[r.IntN(len(creates))]
				add(cancel(c.cal, req, c.bookingID))
			} else {
				cal := pickCal()
				add(cancel(cal, req, actor.BookingID(cal, "never"+req)))
			}
		case x < 84 && len(valid) > 0:
			// Reuse a request id: the same request (a retry), possibly
			// reformatted, or another request under the same key.
			m := valid[r.IntN(len(valid))]
			var env struct {
				RequestID string `json:"request_id"`
			}
			_ = json.Unmarshal(m.in.Data, &env)
			if r.IntN(2) == 0 {
				m.in.Data = append([]byte(" \n"), m.in.Data...)
				add(m)
			} else {
				add(create(m.cal, env.RequestID))
			}
		default:
			cal := cals[r.IntN(len(cals))]
			var body string
			switch r.IntN(12) {
			case 7, 8, 9, 10, 11:
				body = invalidCommand(r, cal, req)
			case 0:
				b := make([]byte, r.IntN(40))
				for j := range b {
					b[j] = byte(r.IntN(256))
				}
				body = string(b)
			case 1:
				full := bookCmd(cal, req, at(0), at(15), "x")
				body = full[:r.IntN(len(full))]
			case 2:
				body = bookCmd("c9", req, at(0), at(15), "x") // wrong subject
			case 3:
				body = strings.Replace(upsertCmd(cal, req, "n"), `"v":1`, `"v":0`, 1)
			case 4:
				body = bookCmd(cal, req, at(30), at(30), "x") // invalid, recorded
			case 5:
				body = bookCmd(cal, "q0000", at(30), at(15), "x") // invalid, under an old key
			default:
				body = cancelCmd(cal, req, "bad id")
			}
			add(logMsg{in: actor.Input{SubjectCalendar: cal, Data: []byte(body)}, kind: "other", cal: cal})
		}
	}
	return log
}

// invalidCommand returns a command of a random type that decodes but fails
// validation, most with several invalid fields at once (their order in
// details must not depend on anything but the message).
func invalidCommand(r *rand.Rand, cal, req string) string {
	badID := []string{"not-an-id", "", strings.ToUpper(actor.BookingID(cal, req))}[r.IntN(3)]
	badTimes := fmt.Sprintf(`"start":%q,"end":%q`, at(90).Format(time.RFC3339), at(30).Format(time.RFC3339))
	switch r.IntN(11) {
	case 0, 1:
		// Several invalid weekdays and ranges: the weekly hours are a map.
		days := []string{`"mon":[{"start":"25:00","end":"26:00"}]`, `"tue":[{"start":"10:00","end":"09:00"}]`,
			`"xyz":[]`, `"holiday":[{"start":"09:00","end":"10:00"}]`, `"Sun":[]`, `"wed":[{"start":"9","end":"10:00"}]`,
			`"fri":[{"start":"08:00","end":"12:00"},{"start":"13:00","end":"12:30"}]`, `"sat":[]`}
		r.Shuffle(len(days), func(i, j int) { days[i], days[j] = days[j], days[i] })
		return fmt.Sprintf(`{"v":1,"type":"calendar.upsert","request_id":%q,"calendar_id":%q,"calendar":{"name":"n","timezone":%q,"weekly_hours":{%s},"capacity":%d,"date_overrides":[{"date":"2026-13-01"},{"date":"2026-03-03","closed":true,"hours":[{"start":"09:00","end":"10:00"}]}]}}`,
			req, cal, []string{"Mars/Olympus", "Europe/Berlin", "Local"}[r.IntN(3)], strings.Join(days[:2+r.IntN(len(days)-1)], ","), -r.IntN(3))
	case 2:
		return fmt.Sprintf(`{"v":1,"type":"booking.create","request_id":%q,"calendar_id":%q,"booking":{%s,"customer":"","metadata":[1]}}`, req, cal, badTimes)
	case 3:
		return fmt.Sprintf(`{"v":1,"type":"hold.create","request_id":%q,"calendar_id":%q,"booking":{%s,"customer":"x","ttl_seconds":%d}}`, req, cal, badTimes, 100000+r.IntN(9))
	case 4:
		return fmt.Sprintf(`{"v":1,"type":"booking.reschedule","request_id":%q,"calendar_id":%q,"booking_id":%q,"reschedule":{%s}}`, req, cal, badID, badTimes)
	case 5:
		typ := []string{actor.TypeBookingCancel, actor.TypeHoldConfirm, actor.TypeHoldRelease}[r.IntN(3)]
		return fmt.Sprintf(`{"v":1,"type":%q,"request_id":%q,"calendar_id":%q,"booking_id":%q}`, typ, req, cal, badID)
	case 6:
		return fmt.Sprintf(`{"v":1,"type":"busy.set","request_id":%q,"calendar_id":%q,"busy":{"block_id":"blk","start":%q,"end":%q}}`,
			req, cal, at(0).Format(time.RFC3339), at(0).Add(400*24*time.Hour).Format(time.RFC3339))
	case 7:
		return fmt.Sprintf(`{"v":1,"type":"busy.clear","request_id":%q,"calendar_id":%q,"busy":{"block_id":"bad block"}}`, req, cal)
	case 8:
		return fmt.Sprintf(`{"v":1,"type":"hold.expire","request_id":"bad id %s","calendar_id":%q}`, req, cal)
	case 9:
		return fmt.Sprintf(`{"v":1,"type":"booking.move","request_id":"%s!","calendar_id":%q}`, req, cal)
	default:
		return fmt.Sprintf(`{"v":1,"type":"busy.set","request_id":%q,"calendar_id":%q}`, req, cal)
	}
}

// mayLoseAnswer lists the messages whose request id some message gave a
// record retention, and the early hold.expire commands, which are not
// recorded: redelivered after that record expired (or was replaced by a
// later decision), or never recorded, such a message has no answer any
// more (nil).
func mayLoseAnswer(log []logMsg) map[uint64]bool {
	key := func(m logMsg) string {
		var env struct {
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(m.in.Data, &env)
		return m.cal + "\x00" + env.RequestID
	}
	expiring := map[string]bool{}
	for _, m := range log {
		if m.recordTTL > 0 {
			expiring[key(m)] = true
		}
	}
	lost := map[uint64]bool{}
	for _, m := range log {
		// An early hold.expire (naming an expiry after its log time,
		// which is at least its own timestamp) is never recorded.
		early := m.kind == "expire" && m.in.At.Before(m.iv.Start)
		lost[m.in.Seq] = m.kind != "other" && (expiring[key(m)] || early)
	}
	return lost
}

// randomBatches splits msgs into batches of 1 to 60 messages. With
// redeliver, batches also get copies of earlier messages (seq <= applied).
func randomBatches(r *rand.Rand, msgs []actor.Input, redeliver bool) (batches [][]actor.Input) {
	for i := 0; i < len(msgs); {
		n := min(1+r.IntN(60), len(msgs)-i)
		var b []actor.Input
		for _, m := range msgs[i : i+n] {
			if redeliver && i > 0 && r.IntN(8) == 0 {
				for range 1 + r.IntN(3) {
					b = append(b, msgs[r.IntN(i)]) // already applied
				}
			}
			b = append(b, m)
			i++
		}
		batches = append(batches, b)
	}
	return batches
}

func TestApplyDeterministic(t *testing.T) {
	const n = 2000
	log := genLog(7, n)
	msgs := make([]actor.Input, len(log))
	for i, m := range log {
		msgs[i] = m.in
	}
	want := map[uint64][]byte{}

	// (a) one batch.
	sa := datatest.MustOpen(t)
	outA := applyInputs(t, sa, 0, msgs...)
	for i, o := range outA {
		if o.Skipped || o.Seq != msgs[i].Seq || o.Reply == nil {
			t.Fatalf("seq %d: %+v", msgs[i].Seq, o)
		}
		want[o.Seq] = o.Reply
	}
	checkAgainstModel(t, sa, log, want)
	dumpA := dumpStore(t, sa, msgs)
	// Records with a retention came and went.
	expired := 0
	_ = sa.View(func(tx *data.Tx) error {
		for _, m := range log {
			var env struct {
				RequestID string `json:"request_id"`
			}
			_ = json.Unmarshal(m.in.Data, &env)
			if _, ok, _ := tx.Request(m.cal, env.RequestID); m.recordTTL > 0 && !ok {
				expired++
			}
		}
		return nil
	})
	if expired == 0 {
		t.Error("no request record expired")
	}

	lost := mayLoseAnswer(log)
	r := rand.New(rand.NewPCG(8, 8))
	for _, redeliver := range []bool{false, true} {
		name := "batches"
		if redeliver {
			name = "batches+redeliveries"
		}
		t.Run(name, func(t *testing.T) {
			s := datatest.MustOpen(t)
			batches := randomBatches(r, msgs, redeliver)
			var applied uint64
			dups := 0
			for _, b := range batches {
				outs := applyInputs(t, s, 0, b...)
				for i, o := range outs {
					isDup := b[i].Seq <= applied
					if isDup {
						dups++
					} else {
						applied = b[i].Seq
					}
					if o.Skipped != isDup || o.Seq != b[i].Seq {
						t.Fatalf("seq %d: skipped %v, want %v", b[i].Seq, o.Skipped, isDup)
					}
					if !bytes.Equal(o.Reply, want[o.Seq]) && !(isDup && o.Reply == nil && lost[o.Seq]) {
						t.Fatalf("seq %d (redelivered %v): reply\n%s\nwant\n%s", o.Seq, isDup, o.Reply, want[o.Seq])
					}
				}
			}
			if redeliver && dups == 0 {
				t.Fatal("no redeliveries generated")
			}
			if got := dumpStore(t, s, msgs); got != dumpA {
				t.Errorf("index differs from the one-batch run:\n%s", firstDiff(got, dumpA))
			}
			datatest.CheckInvariants(t, s)
		})
	}
	datatest.CheckInvariants(t, sa)
}

// TestRepliesIdenticalOverRuns decodes and applies the same random log,
// with invalid commands of every type among the valid ones, 50 times into
// new indexes: every reply and the final index must be byte-identical each
// time. (Anything that depends on map order, the clock or randomness shows
// up as a difference between runs.)
func TestRepliesIdenticalOverRuns(t *testing.T) {
	const runs, n = 50, 600
	log := genLog(21, n)
	msgs := make([]actor.Input, len(log))
	for i, m := range log {
		msgs[i] = m.in
	}
	// The random log may miss a type's invalid variant: add one of each
	// type that is missing, after the log.
	extra := rand.New(rand.NewPCG(21, 5))
	seen := map[string]bool{}
	for _, m := range msgs {
		var env struct{ Type string }
		if json.Unmarshal(m.Data, &env) == nil {
			seen[env.Type] = true
		}
	}
	last := msgs[len(msgs)-1]
	for k := 0; k < 10000 && len(seen) < 11; k++ {
		body := invalidCommand(extra, "c1", fmt.Sprintf("inv%04d", k))
		var env struct{ Type string }
		_ = json.Unmarshal([]byte(body), &env)
		if seen[env.Type] {
			continue
		}
		seen[env.Type] = true
		last = actor.Input{Seq: last.Seq + 1, At: last.At.Add(time.Second), SubjectCalendar: "c1", Data: []byte(body)}
		msgs = append(msgs, last)
	}
	var (
		want     [][]byte
		wantDump string
	)
	for run := range runs {
		s := datatest.MustOpen(t)
		outs := applyInputs(t, s, 0, msgs...)
		dump := dumpStore(t, s, msgs)
		if run == 0 {
			for _, o := range outs {
				want = append(want, o.Reply)
			}
			wantDump = dump
			continue
		}
		for i, o := range outs {
			if !bytes.Equal(o.Reply, want[i]) {
				t.Fatalf("run %d, seq %d: reply\n%s\nfirst run\n%s", run, o.Seq, o.Reply, want[i])
			}
		}
		if dump != wantDump {
			t.Fatalf("run %d: index differs from the first run:\n%s", run, firstDiff(dump, wantDump))
		}
	}
	// The log must exercise rejections of every command type.
	types := map[string]bool{}
	for _, b := range want {
		if r := decodeReply(t, b); r.Outcome == actor.OutcomeRejected && len(r.Details) > 0 {
			types[r.Type] = true
		}
	}
	for _, typ := range []string{actor.TypeCalendarUpsert, actor.TypeBookingCreate, actor.TypeBookingCancel, actor.TypeBookingReschedule,
		actor.TypeHoldCreate, actor.TypeHoldConfirm, actor.TypeHoldRelease, actor.TypeHoldExpire, actor.TypeBusySet, actor.TypeBusyClear, "booking.move"} {
		if !types[typ] {
			t.Errorf("no rejection with details for %s in the log (%v)", typ, types)
		}
	}
}

// checkAgainstModel replays the replies of a log against a simple model of
// the calendars (confirmed intervals and holds, checked by brute force) and
// checks every decision, then compares the final listing with the model. Its
// "now" is the latest stream timestamp so far: every time a reply carries
// (created_at, cancelled_at, updated_at, a hold's expiry) must be it, never a
// timestamp that stepped back. It also checks that the log exercised every
// outcome.
func checkAgainstModel(t *testing.T, s *data.Store, log []logMsg, replies map[uint64][]byte) {
	t.Helper()
	type heldIv struct {
		iv        data.Interval
		exp       time.Time
		confirmed bool
		expired   bool // its expiry was recorded by a hold.expire
	}
	cals := map[string]bool{}
	confirmed := map[string]map[string]data.Interval{} // cal -> booking id -> interval
	holds := map[string]map[string]*heldIv{}           // cal -> hold id -> hold, as long as it is held
	created := map[string]bool{}                       // cal/booking id ever confirmed
	codes := map[string]int{}
	var now time.Time
	// taken reports whether iv overlaps a confirmed booking or a live hold
	// of cal at now, and whether conflict is one of those.
	taken := func(cal string, iv data.Interval, conflict *data.Interval) (overlaps, conflictOK bool) {
		var occupied []data.Interval
		for _, c := range confirmed[cal] {
			occupied = append(occupied, c)
		}
		for _, h := range holds[cal] {
			if !h.confirmed && now.Before(h.exp) {
				occupied = append(occupied, h.iv)
			}
		}
		for _, o := range occupied {
			if o.Overlaps(iv) {
				overlaps = true
				conflictOK = conflictOK || (conflict != nil && o.Start.Equal(conflict.Start) && o.End.Equal(conflict.End))
			}
		}
		return overlaps, conflictOK
	}
	sameTime := func(seq uint64, what string, got, want time.Time) {
		t.Helper()
		if !got.Equal(want) {
			t.Fatalf("seq %d: %s %s, want the log's now %s", seq, what, got.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
		}
	}
	for _, m := range log {
		if m.in.At.After(now) {
			now = m.in.At
		}
		raw := replies[m.in.Seq]
		r := decodeReply(t, raw)
		codes[r.Outcome+"/"+r.Code]++
		if r.Seq != m.in.Seq {
			// A recorded answer: the reply of the earlier message, verbatim.
			if r.Seq > m.in.Seq || !bytes.Equal(raw, replies[r.Seq]) {
				t.Fatalf("seq %d: replay of seq %d differs:\n%s\n%s", m.in.Seq, r.Seq, raw, replies[r.Seq])
			}
			codes["retry"]++
			continue
		}
		if r.Outcome == actor.OutcomeRejected && r.Code == "" {
			t.Fatalf("seq %d: rejection without code: %s", m.in.Seq, raw)
		}
		if bk := r.Booking; bk != nil && bk.CancelledAt != nil && bk.CancelledAt.Before(bk.CreatedAt) {
			t.Fatalf("seq %d: cancelled_at before created_at: %s", m.in.Seq, raw)
		}
		if r.Code == actor.CodeIdempotencyKeyReused || m.kind == "other" {
			continue
		}
		switch {
		case m.kind == "upsert" && r.Outcome == actor.OutcomeAccepted:
			if r.Created == cals[m.cal] {
				t.Fatalf("seq %d: created %v for a calendar that exists: %v", m.in.Seq, r.Created, cals[m.cal])
			}
			sameTime(m.in.Seq, "updated_at", r.Calendar.UpdatedAt, now)
			cals[m.cal] = true
		case r.Code == actor.CodeCalendarNotFound:
			if cals[m.cal] {
				t.Fatalf("seq %d: calendar_not_found for existing %s", m.in.Seq, m.cal)
			}
		case (m.kind == "create" || m.kind == "hold") && r.Outcome == actor.OutcomeAccepted:
			if overlaps, _ := taken(m.cal, m.iv, nil); overlaps {
				t.Fatalf("seq %d: accepted %v overlapping a booking or live hold", m.in.Seq, m.iv)
			}
			sameTime(m.in.Seq, "created_at", r.Booking.CreatedAt, now)
			if m.kind == "hold" {
				sameTime(m.in.Seq, "expires_at - ttl", r.Booking.ExpiresAt.Add(-m.ttl), now)
				if holds[m.cal] == nil {
					holds[m.cal] = map[string]*heldIv{}
				}
				holds[m.cal][m.bookingID] = &heldIv{iv: m.iv, exp: now.Add(m.ttl)}
				continue
			}
			if confirmed[m.cal] == nil {
				confirmed[m.cal] = map[string]data.Interval{}
			}
			confirmed[m.cal][m.bookingID] = m.iv
			created[m.cal+"/"+m.bookingID] = true
		case (m.kind == "create" || m.kind == "hold") && r.Code == actor.CodeSlotTaken:
			if overlaps, ok := taken(m.cal, m.iv, r.Conflict); !overlaps || !ok {
				t.Fatalf("seq %d: slot_taken %v, conflict %v not a booking or live hold overlapping it", m.in.Seq, m.iv, r.Conflict)
			}
		case m.kind == "confirm":
			h := holds[m.cal][m.bookingID]
			switch {
			case r.Outcome == actor.OutcomeAccepted && h != nil && (h.confirmed || now.Before(h.exp)):
				if !h.confirmed {
					h.confirmed = true
					if confirmed[m.cal] == nil {
						confirmed[m.cal] = map[string]data.Interval{}
					}
					confirmed[m.cal][m.bookingID] = h.iv
					created[m.cal+"/"+m.bookingID] = true
				}
			case r.Code == actor.CodeHoldExpired && h != nil && !h.confirmed && !now.Before(h.exp):
				h.expired = true // the refused confirm records the expiry too
			case r.Code == actor.CodeHoldNotFound && h == nil:
			default:
				t.Fatalf("seq %d: hold.confirm of %s (model %+v, now %s): %s", m.in.Seq, m.bookingID, h, now, raw)
			}
		case m.kind == "expire" && r.Outcome == actor.OutcomeAccepted:
			// It records the expiry of every due hold of the calendar,
			// early or not; an early one (naming an expiry after the log
			// time) is not recorded, so its request id can come again.
			n := 0
			for _, h := range holds[m.cal] {
				if !h.confirmed && !h.expired && !now.Before(h.exp) {
					h.expired = true
					n++
				}
			}
			if want := fmt.Sprintf("%d holds expired", n); !strings.HasPrefix(r.Message, want) {
				t.Fatalf("seq %d: hold.expire says %q, the model %q", m.in.Seq, r.Message, want)
			}
			if early := now.Before(m.iv.Start); early != strings.Contains(r.Message, "not recorded") {
				t.Fatalf("seq %d: hold.expire for %s at log time %s, early %v: %q", m.in.Seq, m.iv.Start, now, early, r.Message)
			}
			codes["expire"]++
			if now.Before(m.iv.Start) {
				codes["expire early"]++
			}
		case m.kind == "cancel" && r.Outcome == actor.OutcomeAccepted:
			if !created[m.cal+"/"+m.bookingID] {
				t.Fatalf("seq %d: cancelled a booking never created", m.in.Seq)
			}
			if _, live := confirmed[m.cal][m.bookingID]; live {
				sameTime(m.in.Seq, "cancelled_at", *r.Booking.CancelledAt, now)
			}
			delete(confirmed[m.cal], m.bookingID)
		case m.kind == "cancel" && r.Code == actor.CodeBookingNotFound:
			if created[m.cal+"/"+m.bookingID] {
				t.Fatalf("seq %d: booking_not_found for a created booking", m.in.Seq)
			}
		default:
			t.Fatalf("seq %d: unexpected reply to a %s: %s", m.in.Seq, m.kind, raw)
		}
	}
	for _, want := range []string{"accepted/", "rejected/" + actor.CodeSlotTaken, "rejected/" + actor.CodeCalendarNotFound,
		"rejected/" + actor.CodeBookingNotFound, "rejected/" + actor.CodeIdempotencyKeyReused,
		"rejected/" + actor.CodeInvalidCommand, "rejected/" + actor.CodeInvalidRequest, "retry",
		"rejected/" + actor.CodeHoldExpired, "rejected/" + actor.CodeHoldNotFound, "expire", "expire early"} {
		if codes[want] == 0 {
			t.Errorf("the log never produced %q (%v)", want, codes)
		}
	}
	t.Logf("outcomes: %v", codes)
	_ = s.View(func(tx *data.Tx) error {
		for cal, m := range confirmed {
			bks, _, err := tx.ListBookings(cal, minTime, maxTime, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(bks) != len(m) {
				t.Errorf("%s: %d bookings listed, model has %d", cal, len(bks), len(m))
			}
			for _, bk := range bks {
				if iv, ok := m[bk.ID]; !ok || !iv.Start.Equal(bk.Start) || !iv.End.Equal(bk.End) {
					t.Errorf("%s: listed %s not in the model", cal, bk.ID)
				}
			}
		}
		if got := tx.LogNow(0); !got.Equal(now) {
			t.Errorf("partition's log now %s, want the latest stream timestamp %s", got, now)
		}
		return nil
	})
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n got %s\nwant %s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d lines", len(al), len(bl))
}

// --- fuzzing ---

var fuzzSeeds = []string{
	upsertCmd("cal1", "u9", "n"),
	bookCmd("cal1", "f1", at(200), at(260), "Ada"),
	bookCmd("cal1", "f2", at(90), at(100), "Ada"), // overlaps the base booking
	bookCmd("cal1", "base-b1", at(60), at(120), "Ada"),
	bookCmd("cal1", "base-b1", at(60), at(121), "Ada"),
	cancelCmd("cal1", "f3", actor.BookingID("cal1", "base-b1")),
	cancelCmd("cal1", "f4", actor.BookingID("cal1", "nope")),
	bookCmd("cal2", "f5", at(0), at(10), "Ada"),
	bookCmdMeta("cal1", "f6", at(0), at(10), "Ada", `{"b":[1,{"c":1e999}],"a":null}`),
	`{"v":1,"type":"booking.create","request_id":"f7","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T10:00:00Z","customer":""}}`,
	`{"v":2}`,
	`{"v":1}}`,
	`{`,
	``,
}

func FuzzDecodeApply(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	s := datatest.MustOpen(f)
	base := []string{
		upsertCmd("cal1", "base-u", "n"),
		bookCmd("cal1", "base-b1", at(60), at(120), "Ada"),
		bookCmd("cal1", "base-b2", at(120), at(180), "Bob"),
		cancelCmd("cal1", "base-c", actor.BookingID("cal1", "base-b2")),
	}
	var ins []actor.Input
	for i, b := range base {
		ins = append(ins, actor.Input{Seq: uint64(i + 1), At: t0, SubjectCalendar: "cal1", Data: []byte(b)})
	}
	applyInputs(f, s, 0, ins...)
	errRollback := errors.New("rollback")

	f.Fuzz(func(t *testing.T, msg []byte) {
		const seq = 100
		in := actor.Input{Seq: seq, At: t0.Add(time.Hour), SubjectCalendar: "cal1", Data: msg}
		d := decodeNoSkips(in)
		if d.Newer > 0 {
			// A newer build's command: never decided here (schema_test.go).
			if d.Newer <= actor.KnownSchemaVersion || d.Reject != nil || d.Fingerprint != "" {
				t.Fatalf("newer %+v", d)
			}
			return
		}
		if d.Reject != nil {
			if d.Reject.Code == "" || d.Reject.Outcome != actor.OutcomeRejected || d.Reject.Seq != seq {
				t.Fatalf("reject %+v", d.Reject)
			}
		} else if d.Fingerprint == "" || d.Cmd.CalendarID != "cal1" {
			t.Fatalf("accepted command %+v without fingerprint or on another calendar", d.Cmd)
		}
		// Apply, check, and roll back, so that every input starts from the
		// same index. t.Errorf (not Fatal): fn runs on the commit goroutine.
		err := s.Commit(func(tx *data.Tx) error {
			out, err := actor.Apply(tx, 0, []actor.Decoded{d})
			if err != nil {
				return err
			}
			var r actor.Reply
			if err := json.Unmarshal(out[0].Reply, &r); err != nil {
				t.Errorf("reply %q: %v", out[0].Reply, err)
				return errRollback
			}
			switch {
			case r.Outcome == actor.OutcomeRejected && r.Code == "":
				t.Errorf("rejection without a code: %s", out[0].Reply)
			case r.Outcome != actor.OutcomeRejected && r.Outcome != actor.OutcomeAccepted:
				t.Errorf("outcome %q", r.Outcome)
			case r.Seq > seq || r.V != actor.SchemaVersion:
				t.Errorf("reply %s", out[0].Reply)
			}
			if got := tx.AppliedSeq(0); got != seq {
				t.Errorf("applied seq %d", got)
			}
			datatest.CheckTx(t, tx)

			// Redelivered: skipped, same answer.
			again, err := actor.Apply(tx, 0, []actor.Decoded{decodeNoSkips(in)})
			if err != nil {
				return err
			}
			if !again[0].Skipped || !bytes.Equal(again[0].Reply, out[0].Reply) {
				t.Errorf("redelivery: %+v, first reply %s", again[0], out[0].Reply)
			}
			// Retried under a new sequence: a valid request gets its
			// recorded answer.
			in2 := in
			in2.Seq = seq + 1
			retry, err := actor.Apply(tx, 0, []actor.Decoded{decodeNoSkips(in2)})
			if err != nil {
				return err
			}
			if d.Reject == nil && r.Code != actor.CodeIdempotencyKeyReused && !bytes.Equal(retry[0].Reply, out[0].Reply) {
				t.Errorf("retry reply\n%s\nwant\n%s", retry[0].Reply, out[0].Reply)
			}
			datatest.CheckTx(t, tx)
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatalf("commit: %v", err)
		}
	})
}

// recordJSON renders a request record's reply as the JSON that was sent.
func recordJSON(tb testing.TB, rec data.RequestRecord) []byte {
	tb.Helper()
	b, err := actor.RecordJSON(rec)
	if err != nil {
		tb.Fatalf("record reply: %v", err)
	}
	return b
}

// recordString is a whole request record (fingerprint, seq, reply) as text.
func recordString(tb testing.TB, rec data.RequestRecord) string {
	tb.Helper()
	return fmt.Sprintf("fp=%s seq=%d expires=%s reply=%s", rec.Fingerprint, rec.Seq, rec.Expires.Format(time.RFC3339Nano), recordJSON(tb, rec))
}

// TestApplyCrashRecovery replays the same log through simulated crashes at
// random points: a batch whose transaction never committed (crash before
// commit), or a committed batch whose messages are delivered again (crash
// between commit and ack). After each crash the index file is closed and
// reopened, and delivery resumes where a restarting writer resumes: after
// the applied sequence the index holds, or earlier when acks were lost.
// Replies and the final index must equal the uninterrupted run's.
func TestApplyCrashRecovery(t *testing.T) {
	const n = 2000
	log := genLog(7, n)
	msgs := make([]actor.Input, len(log))
	for i, m := range log {
		msgs[i] = m.in
	}
	lost := mayLoseAnswer(log)
	ref := datatest.MustOpen(t)
	want := map[uint64][]byte{}
	for _, o := range applyInputs(t, ref, 0, msgs...) {
		want[o.Seq] = o.Reply
	}
	wantDump := dumpStore(t, ref, msgs)

	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			path := t.TempDir() + "/index.db"
			s, err := data.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			crashes := 0
			next := 0 // index into msgs of the next message to deliver
			for next < len(msgs) {
				size := 1 + rng.IntN(64)
				end := min(next+size, len(msgs))
				batch := make([]actor.Decoded, 0, end-next)
				for _, in := range msgs[next:end] {
					batch = append(batch, actor.Decode(in))
				}
				crash := rng.IntN(8)
				var outs []actor.Output
				err := s.Commit(func(tx *data.Tx) error {
					var err error
					outs, err = actor.Apply(tx, 0, batch)
					if err == nil && crash == 0 {
						return errRollback // the process died before the commit
					}
					return err
				})
				switch {
				case crash == 0 && errors.Is(err, errRollback):
				case err != nil:
					t.Fatal(err)
				default:
					for _, o := range outs {
						if !bytes.Equal(o.Reply, want[o.Seq]) && !(o.Skipped && o.Reply == nil && lost[o.Seq]) {
							t.Fatalf("seq %d: reply\n%s\nwant\n%s", o.Seq, o.Reply, want[o.Seq])
						}
					}
				}
				if crash > 1 {
					next = end // acked: the stream moves on
					continue
				}
				// Crash: reopen the file; redelivery starts after the last
				// acked message, which may be before what was committed.
				crashes++
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if s, err = data.Open(path); err != nil {
					t.Fatal(err)
				}
				var applied uint64
				_ = s.View(func(tx *data.Tx) error { applied = tx.AppliedSeq(0); return nil })
				back := rng.IntN(8) // lost acks: some committed messages come again
				for next > 0 && (msgs[next-1].Seq > applied || back > 0) {
					if msgs[next-1].Seq <= applied {
						back--
					}
					next--
				}
			}
			if crashes == 0 {
				t.Fatal("no crash simulated")
			}
			if got := dumpStore(t, s, msgs); got != wantDump {
				t.Errorf("index after %d crashes differs:\n%s", crashes, firstDiff(got, wantDump))
			}
			datatest.CheckInvariants(t, s)
			s.Close()
			t.Logf("%d crashes", crashes)
		})
	}
}
