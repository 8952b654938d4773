package actor_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// The JSON Schemas of the command stream's messages (commands, replies and
// outcome events), checked in for importers and consumers that do not read
// Go, and the document that describes them.
const (
	schemaDir   = "../docs/schema"
	protocolDoc = "../docs/protocol.md"
)

// protocolSchemas are the compiled schemas, and the enumerations of known
// values in their $defs.
type protocolSchemas struct {
	command, reply, event             *jsonschema.Schema
	eventBatchLine                    *jsonschema.Schema
	knownType, knownCode, knownStatus *jsonschema.Schema
}

func compileSchemas(t *testing.T) protocolSchemas {
	t.Helper()
	dir, err := filepath.Abs(schemaDir)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat() // date-time and date are checked, not only annotations
	compile := func(loc string) *jsonschema.Schema {
		s, err := c.Compile(filepath.Join(dir, loc))
		if err != nil {
			t.Fatalf("schema %s: %v", loc, err)
		}
		return s
	}
	return protocolSchemas{
		command: compile("command.schema.json"),
		reply:   compile("reply.schema.json"),
		event:   compile("event.schema.json"),
		// Checked against the batches of a running node by
		// queue/eventbatch_test.go.
		eventBatchLine: compile("event-batch-line.schema.json"),
		knownType:      compile("command.schema.json#/$defs/commandType"),
		knownCode:      compile("reply.schema.json#/$defs/knownCode"),
		knownStatus:    compile("reply.schema.json#/$defs/knownStatus"),
	}
}

// schemaEnum reads the enum at $defs/name of a schema file.
func schemaEnum(t *testing.T, file, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(schemaDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Defs map[string]struct {
			Enum []string `json:"enum"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	e := s.Defs[name].Enum
	if len(e) == 0 {
		t.Fatalf("%s: no enum at $defs/%s", file, name)
	}
	return e
}

// stringConsts returns the values of the exported string constants of the
// package in dir (test files left out) whose names are prefix followed by
// an upper-case letter: what the code defines, whatever the schema says.
func stringConsts(t *testing.T, dir, prefix string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					rest, ok := strings.CutPrefix(name.Name, prefix)
					if !ok || rest == "" || rest[0] < 'A' || rest[0] > 'Z' || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, v)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestSchemaEnumsMatchCode: the schemas' command types, outcomes,
// rejection codes and statuses are exactly the code's constants, and
// docs/protocol.md names each of them. A type, code or status added to the
// code without the schema and the document fails here.
func TestSchemaEnumsMatchCode(t *testing.T) {
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	var headings []string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "#") {
			headings = append(headings, l)
		}
	}
	var outcome struct {
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	b, err := os.ReadFile(filepath.Join(schemaDir, "reply.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &outcome); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what       string
		inSchema   []string
		inCode     []string
		inHeadings bool // each needs a heading of its own in the document
	}{
		{"command types", schemaEnum(t, "command.schema.json", "commandType"), stringConsts(t, ".", "Type"), true},
		{"outcomes", outcome.Properties["outcome"].Enum, stringConsts(t, ".", "Outcome"), false},
		{"rejection codes", schemaEnum(t, "reply.schema.json", "knownCode"), stringConsts(t, ".", "Code"), false},
		{"statuses", schemaEnum(t, "reply.schema.json", "knownStatus"), stringConsts(t, "../data", "Status"), false},
	} {
		inSchema := slices.Sorted(slices.Values(c.inSchema))
		if !slices.Equal(inSchema, c.inCode) {
			t.Errorf("%s: the schema lists\n%q\nthe code defines\n%q", c.what, inSchema, c.inCode)
		}
		if len(c.inCode) < 2 {
			t.Errorf("%s: only %q found in the code", c.what, c.inCode)
		}
		for _, v := range c.inCode {
			if !bytes.Contains(doc, []byte("`"+v+"`")) {
				t.Errorf("%s: docs/protocol.md does not mention `%s`", c.what, v)
			}
			if c.inHeadings && !slices.ContainsFunc(headings, func(h string) bool { return strings.Contains(h, "`"+v+"`") }) {
				t.Errorf("%s: docs/protocol.md has no heading for `%s`", c.what, v)
			}
		}
	}
}

// validator counts the messages checked against the schemas and reports the
// first failures.
type validator struct {
	t      *testing.T
	s      protocolSchemas
	n      map[string]int
	failed int
	codes  map[string]bool // rejection codes seen
	status map[string]bool // booking statuses seen
	types  map[string]bool // types of accepted replies seen
}

func newValidator(t *testing.T) *validator {
	return &validator{t: t, s: compileSchemas(t), n: map[string]int{},
		codes: map[string]bool{}, status: map[string]bool{}, types: map[string]bool{}}
}

func (v *validator) check(s *jsonschema.Schema, what string, b []byte) bool {
	v.t.Helper()
	v.n[what]++
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err == nil {
		err = s.Validate(inst)
	}
	if err != nil {
		v.failed++
		if v.failed <= 10 {
			v.t.Errorf("%s\n%s\ndoes not validate: %v", what, b, err)
		}
		if v.failed == 10 {
			v.t.Fatal("too many failures")
		}
		return false
	}
	return true
}

// command checks a message the writer accepts: as sent, and as bookline's
// own producers would send it (json.Marshal of the validated command).
func (v *validator) command(in actor.Input) {
	v.t.Helper()
	d := actor.Decode(in)
	if d.Reject != nil || d.Newer != 0 {
		return
	}
	v.check(v.s.command, "command", in.Data)
	b, err := json.Marshal(d.Cmd)
	if err != nil {
		v.t.Fatal(err)
	}
	v.check(v.s.command, "command (marshalled)", b)
}

// reply checks a decided reply, and that it uses only the values this
// version knows.
func (v *validator) reply(b []byte) {
	v.t.Helper()
	if b == nil || !v.check(v.s.reply, "reply", b) {
		return
	}
	var r actor.Reply
	if err := json.Unmarshal(b, &r); err != nil {
		v.t.Fatal(err)
	}
	known := func(s *jsonschema.Schema, what, val string) {
		v.t.Helper()
		if s.Validate(val) != nil {
			v.t.Errorf("reply %s: %s %q is not in the schema's known values", b, what, val)
		}
	}
	if r.Code != "" {
		known(v.s.knownCode, "code", r.Code)
		v.codes[r.Code] = true
	}
	if r.Outcome == actor.OutcomeAccepted {
		known(v.s.knownType, "type", r.Type)
		v.types[r.Type] = true
	}
	if r.Booking != nil {
		known(v.s.knownStatus, "status", r.Booking.Status)
		v.status[r.Booking.Status] = true
	}
}

// apply decides msgs in one partition (one batch per message, so that
// each decision sees the previous ones committed), checks every command,
// reply and outcome event, and returns the replies.
func (v *validator) apply(msgs []actor.Input) []actor.Output {
	v.t.Helper()
	h := newHarness(v.t)
	skips := skipsIn(msgs)
	var outs []actor.Output
	system := 0 // commands about a partition: no outcome event
	for _, in := range msgs {
		v.command(in)
		d := actor.Decode(in)
		if d.SkipCandidate() {
			d.SetSkip(skips[in.Seq])
		}
		if d.Cmd.V >= 2 && (d.Cmd.Type == actor.TypeSchemaUpgrade || d.Cmd.Type == actor.TypePartitionSkip) {
			system++
		}
		var out []actor.Output
		if err := h.s.Commit(func(tx *data.Tx) (err error) { out, err = actor.Apply(tx, 0, []actor.Decoded{d}); return err }); err != nil {
			v.t.Fatal(err)
		}
		v.reply(out[0].Reply)
		outs = append(outs, out[0])
	}
	replies := map[uint64][]byte{}
	for _, o := range outs {
		replies[o.Seq] = o.Reply
	}
	h.view(func(tx *data.Tx) {
		evs, err := tx.PendingEvents(1 << 30)
		if err != nil {
			v.t.Fatal(err)
		}
		if len(evs) != len(msgs)-system {
			v.t.Errorf("%d outcome events for %d decided messages, %d of them about a partition", len(evs), len(msgs), system)
		}
		for _, ev := range evs {
			parts, err := actor.EventParts(ev.Payload) // as the event publisher sends them
			if err != nil {
				v.t.Fatal(err)
			}
			for _, part := range parts {
				v.check(v.s.event, "event", part.JSON)
				if r := replies[ev.Seq]; r != nil && part.Calendar == "" && !bytes.Equal(part.JSON, r) {
					v.t.Errorf("seq %d: event payload\n%s\ndiffers from the reply\n%s", ev.Seq, part.JSON, r)
				}
			}
		}
	})
	return outs
}

// everyOutcome is a log on calendar "s" (Europe/Berlin rules, a Google link)
// in which every command type is accepted, every rejection code is given
// and every booking status appears; want is each message's code ("" for
// accepted).
func everyOutcome() (msgs []actor.Input, want []string) {
	cet := time.FixedZone("CET", 3600) // Berlin in March 2026
	tue := func(h, m int) time.Time { return time.Date(2026, 3, 3, h, m, 0, 0, cet) }
	wed := func(h, m int) time.Time { return time.Date(2026, 3, 4, h, m, 0, 0, cet) }
	now := t0 // Monday 2026-03-02 10:00 in Berlin
	addOn := func(subject, code, body string) {
		now = now.Add(time.Second)
		msgs = append(msgs, actor.Input{Seq: uint64(len(msgs) + 1), At: now, SubjectCalendar: subject, Data: []byte(body), Partitions: 1})
		want = append(want, code)
	}
	add := func(code, body string) { addOn("s", code, body) }
	id := func(req string) string { return actor.BookingID("s", req) }
	cmd := func(typ, req, rest string) string {
		return fmt.Sprintf(`{"v":1,"type":%q,"request_id":%q,"calendar_id":"s"%s}`, typ, req, rest)
	}
	byID := func(typ, req, bookingID string) string {
		return cmd(typ, req, fmt.Sprintf(`,"booking_id":%q`, bookingID))
	}
	hold := func(req string, start time.Time, ttl int) string {
		return cmd(actor.TypeHoldCreate, req, fmt.Sprintf(`,"booking":{"start":%q,"end":%q,"customer":"Hal","ttl_seconds":%d}`,
			start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339), ttl))
	}
	move := func(req, bookingID string, start time.Time) string {
		return cmd(actor.TypeBookingReschedule, req, fmt.Sprintf(`,"booking_id":%q,"reschedule":{"start":%q,"end":%q}`,
			bookingID, start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339)))
	}
	upsert := cmd(actor.TypeCalendarUpsert, "s-u1", `,"calendar":{"name":"Studio","timezone":"Europe/Berlin",`+
		`"weekly_hours":{"mon":[{"start":"08:00","end":"18:00"}],"tue":[{"start":"08:00","end":"18:00"}],"wed":[{"start":"08:00","end":"18:00"}],"sat":[]},`+
		`"date_overrides":[{"date":"2026-12-24","closed":true},{"date":"2026-12-31","hours":[{"start":"09:00","end":"12:00"}]}],`+
		`"slot_step_minutes":15,"min_duration_minutes":15,"max_duration_minutes":240,"buffer_after_minutes":15,`+
		`"min_notice_minutes":60,"horizon_days":30,"capacity":1,"max_hold_ttl_seconds":600,`+
		`"google":{"calendar_id":"studio@example.com","sync_busy":true}}`)

	add(actor.CodeCalendarNotFound, bookCmd("s", "s-b0", tue(10, 0), tue(11, 0), "Ada"))
	add(actor.CodeCalendarNotFound, cmd(actor.TypeHoldExpire, "s-e0", ""))
	add("", upsert)
	add("", strings.Replace(upsert, `"s-u1"`, `"s-u2"`, 1))
	add("", bookCmdMeta("s", "s-b1", tue(10, 0), tue(11, 0), "Ada", `{"room":"3","tags":["a","b"],"n":1.50}`))
	add(actor.CodeSlotTaken, bookCmd("s", "s-b2", tue(10, 0), tue(11, 0), "Bob"))
	add(actor.CodeBufferConflict, bookCmd("s", "s-b3", tue(11, 0), tue(11, 30), "Bob"))
	add(actor.CodeMisaligned, bookCmd("s", "s-b4", tue(12, 7), tue(12, 37), "Bob"))
	add(actor.CodeDurationNotAllowed, bookCmd("s", "s-b5", tue(12, 0), tue(12, 10), "Bob"))
	add(actor.CodeOutsideHours, bookCmd("s", "s-b6", tue(19, 0), tue(19, 30), "Bob"))
	add(actor.CodeTooSoon, bookCmd("s", "s-b7", t0.Add(30*time.Minute), t0.Add(time.Hour), "Bob"))
	add(actor.CodeTooFar, bookCmd("s", "s-b8", t0.Add(40*24*time.Hour), t0.Add(40*24*time.Hour+time.Hour), "Bob"))
	add("", busySetCmd("s", "s-y1", "blk1", tue(13, 0), tue(14, 0)))
	add(actor.CodeExternalBusy, bookCmd("s", "s-b9", tue(13, 0), tue(13, 30), "Bob"))
	add("", busyClearCmd("s", "s-y2", "blk1"))
	add("", busyClearCmd("s", "s-y3", "blk1")) // not set any more: accepted, no change
	add("", bookCmd("s", "s-b10", tue(13, 0), tue(13, 30), "Bob"))
	add("", cancelCmd("s", "s-c1", id("s-b1")))
	add("", cancelCmd("s", "s-c2", id("s-b1"))) // cancelled already
	add(actor.CodeBookingNotFound, cancelCmd("s", "s-c3", id("never")))
	add(actor.CodeBookingNotConfirmed, move("s-r1", id("s-b1"), tue(15, 0)))
	add(actor.CodeBookingNotFound, move("s-r2", id("never"), tue(15, 0)))
	add("", bookCmd("s", "s-b11", tue(15, 0), tue(16, 0), "Cy"))
	add("", move("s-r3", id("s-b11"), tue(15, 30)))
	add(actor.CodeSlotTaken, move("s-r4", id("s-b11"), tue(12, 45))) // overlaps s-b10
	add("", hold("s-h1", wed(10, 0), 300))
	add("", byID(actor.TypeHoldConfirm, "s-h1c", id("s-h1")))
	add(actor.CodeHoldConfirmed, byID(actor.TypeHoldRelease, "s-h1r", id("s-h1")))
	add("", cancelCmd("s", "s-h1x", id("s-h1")))
	add("", byID(actor.TypeHoldConfirm, "s-h1c2", id("s-h1"))) // confirmed before: the booking as it is
	add("", hold("s-h2", wed(12, 0), 0))
	add("", byID(actor.TypeHoldRelease, "s-h2r", id("s-h2")))
	add("", byID(actor.TypeHoldRelease, "s-h2r2", id("s-h2"))) // released already
	add(actor.CodeHoldNotFound, byID(actor.TypeHoldConfirm, "s-h2c", id("s-h2")))
	add(actor.CodeHoldNotFound, byID(actor.TypeHoldConfirm, "s-h6", id("s-b11"))) // a booking, not a hold
	add(actor.CodeHoldNotFound, byID(actor.TypeHoldRelease, "s-h7", id("never")))
	add(actor.CodeInvalidRequest, hold("s-h5", wed(8, 0), 900)) // over the calendar's 600
	add("", hold("s-h3", wed(14, 0), 60))
	add("", hold("s-h4", wed(16, 0), 60)) // clear of s-h3's buffer
	now = now.Add(2 * time.Minute)
	add(actor.CodeHoldExpired, byID(actor.TypeHoldConfirm, "s-h3c", id("s-h3")))
	add("", cmd(actor.TypeHoldExpire, actor.ExpireRequestID(now.Add(-time.Second)), ""))
	add("", cmd(actor.TypeHoldExpire, actor.ExpireRequestID(now.Add(time.Hour)), "")) // early: not recorded
	add("", byID(actor.TypeHoldRelease, "s-h4r", id("s-h4")))                         // expired: as it is
	add("", withTTL(upsert, 600))                                                     // the same request again: from the record
	add(actor.CodeIdempotencyKeyReused, bookCmd("s", "s-b1", tue(16, 0), tue(17, 0), "Ada"))
	add(actor.CodeInvalidRequest, bookCmd("s", "s-i1", tue(17, 0), tue(16, 0), ""))
	add(actor.CodeInvalidRequest, busySetCmd("s", "s-i2", "blk2", tue(9, 0), tue(9, 0).Add(400*24*time.Hour)))
	add(actor.CodeInvalidCommand, cmd("booking.move", "s-i3", ""))
	add(actor.CodeInvalidCommand, `{"v":1,"type":"booking.create","request_id":"s-i4","calendar_id":"other"}`)
	add(actor.CodeInvalidCommand, `{"v":1,"type":`)
	// Schema version 2: the marker, and a command of version 3 that
	// stopped the partition until a skip named it.
	addOn("_bookline-0", "", `{"v":2,"type":"schema.upgrade","request_id":"schema-upgrade.2","calendar_id":"_bookline-0"}`)
	add(actor.CodeCommandSkipped, strings.Replace(bookCmd("s", "s-v3", wed(8, 0), wed(9, 0), "Vi"), `"v":1`, `"v":9`, 1))
	skipped := len(msgs)
	skip := func(req string, seq int) string {
		return fmt.Sprintf(`{"v":2,"type":"partition.skip","request_id":%q,"calendar_id":"_bookline-0","skip":{"seq":%d}}`, req, seq)
	}
	addOn("_bookline-0", "", skip("skip.v3", skipped))
	addOn("_bookline-0", actor.CodeNotStopped, skip("skip.upsert", 3))
	// Schema version 3: series, all or none, with skip, and cancelled
	// from an occurrence on; a version 1 command's recurrence is ignored.
	add("", seriesCmd("s", "s-s1", wed(9, 0), wed(9, 30), "Sam", `{"freq":"weekly","count":3}`, ""))
	add(actor.CodeSlotTaken, seriesCmd("s", "s-s2", tue(13, 0), tue(13, 30), "Sam", `{"freq":"daily","count":2}`, ""))
	add("", seriesCmd("s", "s-s3", tue(15, 30), tue(16, 0), "Sam", `{"freq":"daily","until":"2026-03-05T15:30:00+01:00"}`, `,"on_conflict":"skip"`))
	add("", cancelFollowingCmd("s", "s-s1c", actor.BookingID("s", data.OccurrenceRequestID("s-s1", 1))))
	add(actor.CodeInvalidRequest, cancelFollowingCmd("s", "s-s4", id("s-b10")))
	add("", strings.Replace(seriesCmd("s", "s-s5", wed(11, 0), wed(11, 30), "Old", `{"freq":"daily","count":2}`, ""), `"v":3`, `"v":1`, 1))
	// Schema version 4: a collective on s and t committed, then
	// cancelled; one aborted (t refuses), with its steps refused after.
	addOn("t", "", upsertCmd("t", "t-u1", "T"))
	ids := []string{"s", "t"}
	mon := func(h, m int) time.Time { return time.Date(2026, 3, 9, h, m, 0, 0, cet) }
	add("", prepareCmd("s", "s-k1", ids, mon(10, 0), mon(11, 0)))
	add(actor.CodeCollectivePending, collectiveCancelCmd("s", "s-k1x", "s-k1", ids))
	addOn("t", "", prepareCmd("t", "s-k1", ids, mon(10, 0), mon(11, 0)))
	add("", decideCmd("s-k1", ids, actor.DecisionCommit))
	add("", stepCmd(actor.TypeCollectiveCommit, "s", "s-k1", ids, mon(10, 0), mon(11, 0)))
	addOn("t", "", stepCmd(actor.TypeCollectiveCommit, "t", "s-k1", ids, mon(10, 0), mon(11, 0)))
	add(actor.CodeCollectiveBooking, cancelCmd("s", "s-k1c", actor.CollectiveID(ids, "s-k1")))
	add("", collectiveCancelCmd("s", "s-k1y", "s-k1", ids))
	addOn("t", "", collectiveCancelCmd("t", "s-k1y", "s-k1", ids))
	add("", prepareCmd("s", "s-k2", ids, mon(11, 0), mon(12, 0)))
	addOn("t", "", bookCmd("t", "t-b1", mon(11, 0), mon(12, 0), "Tom"))
	addOn("t", actor.CodeSlotTaken, prepareCmd("t", "s-k2", ids, mon(11, 0), mon(12, 0)))
	add(actor.CodeCollectiveAborted, decideCmd("s-k2", ids, actor.DecisionAbort))
	add("", stepCmd(actor.TypeCollectiveAbort, "s", "s-k2", ids, mon(11, 0), mon(12, 0)))
	// Schema version 5: a collective decided by its votes, one vote
	// fenced (yes), and a member fenced before it voted (no).
	add("", prepareCmd("s", "s-k3", ids, mon(13, 0), mon(14, 0)))
	add("", fenceCmd(5, "s", "s-k3", ids))
	addOn("t", actor.CodeCollectiveAborted, fenceCmd(5, "t", "s-k3", ids))
	addOn("t", actor.CodeCollectiveAborted, prepareCmd("t", "s-k3", ids, mon(13, 0), mon(14, 0)))
	// Schema version 5: a collective moved by half an hour on s and t;
	// a second move refused by t and aborted.
	for _, c := range ids {
		addOn(c, "", prepareCmd(c, "s-k4", ids, mon(14, 30), mon(15, 30)))
	}
	add("", decideCmd("s-k4", ids, actor.DecisionCommit))
	for _, c := range ids {
		addOn(c, "", stepCmd(actor.TypeCollectiveCommit, c, "s-k4", ids, mon(14, 30), mon(15, 30)))
	}
	k4 := actor.CollectiveID(ids, "s-k4")
	for _, c := range ids {
		addOn(c, "", moveCmd(c, "s-m1", "s-k4", ids, mon(15, 0), mon(16, 0)))
	}
	add("", decideCmdByID(actor.MoveID(k4, "s-m1"), ids, actor.DecisionCommit))
	for _, c := range ids {
		addOn(c, "", moveStepCmd(actor.TypeCollectiveMoveCommit, c, k4, "s-m1", ids, time.Time{}, time.Time{}))
	}
	addOn("t", "", bookCmd("t", "t-b2", mon(16, 0), mon(17, 0), "Tom"))
	add("", moveCmd("s", "s-m2", "s-k4", ids, mon(16, 0), mon(17, 0)))
	addOn("t", actor.CodeSlotTaken, moveCmd("t", "s-m2", "s-k4", ids, mon(16, 0), mon(17, 0)))
	add(actor.CodeCollectiveAborted, decideCmdByID(actor.MoveID(k4, "s-m2"), ids, actor.DecisionAbort))
	add("", moveStepCmd(actor.TypeCollectiveMoveAbort, "s", k4, "s-m2", ids, mon(16, 0), mon(17, 0)))
	// Both members' commits of a vote-decided collective in one
	// collective.commits, with an entry of an aborted part not applied.
	add("", prepareCmd("s", "s-k5", ids, mon(10, 0).AddDate(0, 0, 7), mon(11, 0).AddDate(0, 0, 7)))
	addOn("t", "", prepareCmd("t", "s-k5", ids, mon(10, 0).AddDate(0, 0, 7), mon(11, 0).AddDate(0, 0, 7)))
	commitsTok := actor.CommitsToken(0, 1)
	batch, _ := json.Marshal(actor.CommitsCommand(commitsTok, "s-c1", []actor.CommitEntry{entry("s", "s-k5", ids), entry("t", "s-k5", ids),
		entry("s", "s-k2", ids)}, 0))
	addOn(commitsTok, "", string(batch))
	// Pools: one upserted, a choice, a booking recorded; an unknown pool.
	tok := actor.PoolToken("team")
	addOn(tok, actor.CodePoolNotFound, poolChooseCmd("team", "s-q0"))
	addOn(tok, "", poolUpsertCmd("team", "s-q1", []string{"t", "s"}, "weighted", map[string]int{"s": 2}))
	addOn(tok, "", poolChooseCmd("team", "s-q2"))
	addOn(tok, "", poolRecordCmd("team", "s", actor.BookingID("s", "s-q2")))
	return msgs, want
}

// TestSchemaValidatesDecidedMessages: every command the writer accepts, as
// sent and as bookline's producers encode it, validates against
// command.schema.json; every reply against reply.schema.json, every outcome
// event (rendered as the event publisher sends it) against
// event.schema.json. The messages are random logs (bookings, holds,
// cancels, retries, reused keys, invalid messages of every type) and a log
// that gives every rejection code and every status; replies may use only
// the values the schema lists as known, and must use each of them.
func TestSchemaValidatesDecidedMessages(t *testing.T) {
	v := newValidator(t)

	msgs, want := everyOutcome()
	outs := v.apply(msgs)
	for i, o := range outs {
		if o.Reply == nil {
			t.Fatalf("message %d (%s): no reply", i+1, msgs[i].Data)
		}
		wantCode(t, decodeReply(t, o.Reply), want[i])
	}
	for _, m := range fingerprintGolden {
		var env struct {
			CalendarID string `json:"calendar_id"`
		}
		if err := json.Unmarshal([]byte(m.body), &env); err != nil {
			t.Fatal(err)
		}
		v.command(actor.Input{Seq: 1, At: t0, SubjectCalendar: env.CalendarID, Data: []byte(m.body)})
	}
	for seed := range uint64(3) {
		log := genLog(100+seed, 800)
		msgs := make([]actor.Input, len(log))
		for i, m := range log {
			msgs[i] = m.in
		}
		v.apply(msgs)
	}

	for _, c := range []struct {
		what string
		seen map[string]bool
		file string
		def  string
	}{
		{"rejection codes", v.codes, "reply.schema.json", "knownCode"},
		{"statuses", v.status, "reply.schema.json", "knownStatus"},
		{"types of accepted replies", v.types, "command.schema.json", "commandType"},
	} {
		for _, k := range schemaEnum(t, c.file, c.def) {
			// A move record's status once its move was applied: the
			// commit answers with the part, so only reads of the index
			// (GET of the record) show it.
			if !c.seen[k] && k != data.StatusMoved {
				t.Errorf("%s: no reply with %q was checked", c.what, k)
			}
		}
	}
	t.Logf("checked %v", v.n)
}

// schemaRejects are commands the writer rejects for a reason the command
// schema expresses: the schema must refuse each of them too.
var schemaRejects = []struct{ name, body string }{
	{"no v", `{"type":"hold.expire","request_id":"x","calendar_id":"s"}`},
	{"v 0", `{"v":0,"type":"hold.expire","request_id":"x","calendar_id":"s"}`},
	{"v as a string", `{"v":"1","type":"hold.expire","request_id":"x","calendar_id":"s"}`},
	{"no type", `{"v":1,"request_id":"x","calendar_id":"s"}`},
	{"unknown type", `{"v":1,"type":"booking.move","request_id":"x","calendar_id":"s"}`},
	{"no request id", `{"v":1,"type":"hold.expire","calendar_id":"s"}`},
	{"bad request id", `{"v":1,"type":"hold.expire","request_id":"x y","calendar_id":"s"}`},
	{"bad calendar id", `{"v":1,"type":"hold.expire","request_id":"x","calendar_id":"s.t"}`},
	{"record ttl negative", `{"v":1,"type":"hold.expire","request_id":"x","calendar_id":"s","record_ttl_seconds":-1}`},
	{"record ttl too long", `{"v":1,"type":"hold.expire","request_id":"x","calendar_id":"s","record_ttl_seconds":316224001}`},
	{"no calendar", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s"}`},
	{"timezone Local", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"timezone":"Local"}}`},
	{"name too long", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"name":"` + strings.Repeat("é", 201) + `"}}`},
	{"weekday", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"weekly_hours":{"Mon":[]}}}`},
	{"clock", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"weekly_hours":{"mon":[{"start":"25:00","end":"26:00"}]}}}`},
	{"range without end", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"weekly_hours":{"mon":[{"start":"08:00"}]}}}`},
	{"override date", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"date_overrides":[{"date":"2026-13-01"}]}}`},
	{"override closed with hours", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"date_overrides":[{"date":"2026-12-01","closed":true,"hours":[{"start":"08:00","end":"09:00"}]}]}}`},
	{"capacity negative", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"capacity":-1}}`},
	{"capacity too large", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"capacity":1001}}`},
	{"slot step", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"slot_step_minutes":1441}}`},
	{"allowed duration 0", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"allowed_durations_minutes":[0]}}`},
	{"notice", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"min_notice_minutes":525601}}`},
	{"hold ttl bound", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"max_hold_ttl_seconds":86401}}`},
	{"google without id", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"google":{"sync_busy":true}}}`},
	{"google id with a slash", `{"v":1,"type":"calendar.upsert","request_id":"x","calendar_id":"s","calendar":{"google":{"calendar_id":"a/b"}}}`},
	{"no booking", `{"v":1,"type":"booking.create","request_id":"x","calendar_id":"s"}`},
	{"no customer", `{"v":1,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z"}}`},
	{"empty customer", `{"v":1,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":""}}`},
	{"customer too long", `{"v":1,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":"` + strings.Repeat("x", 201) + `"}}`},
	{"no start", `{"v":1,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"end":"2026-12-01T11:00:00Z","customer":"c"}}`},
	{"start not a time", `{"v":1,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"tomorrow","end":"2026-12-01T11:00:00Z","customer":"c"}}`},
	{"start without offset", `{"v":1,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00","end":"2026-12-01T11:00:00Z","customer":"c"}}`},
	{"year 1969", `{"v":1,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"1969-12-31T23:00:00Z","end":"1970-01-01T01:00:00Z","customer":"c"}}`},
	{"year 2200", `{"v":1,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2199-12-31T23:00:00Z","end":"2200-01-01T01:00:00Z","customer":"c"}}`},
	{"metadata not an object", `{"v":1,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":"c","metadata":[1]}}`},
	{"ttl on a booking", `{"v":1,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":"c","ttl_seconds":60}}`},
	{"hold ttl negative", `{"v":1,"type":"hold.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":"c","ttl_seconds":-1}}`},
	{"hold ttl too long", `{"v":1,"type":"hold.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":"c","ttl_seconds":86401}}`},
	{"no hold body", `{"v":1,"type":"hold.create","request_id":"x","calendar_id":"s"}`},
	{"cancel without id", `{"v":1,"type":"booking.cancel","request_id":"x","calendar_id":"s"}`},
	{"cancel with a bad id", `{"v":1,"type":"booking.cancel","request_id":"x","calendar_id":"s","booking_id":"not-an-id"}`},
	{"confirm with an upper-case id", `{"v":1,"type":"hold.confirm","request_id":"x","calendar_id":"s","booking_id":"TF11B2643S1M87JCKBPMA5MGAK"}`},
	{"release without id", `{"v":1,"type":"hold.release","request_id":"x","calendar_id":"s"}`},
	{"reschedule without interval", `{"v":1,"type":"booking.reschedule","request_id":"x","calendar_id":"s","booking_id":"tf11b2643s1m87jckbpma5mgak"}`},
	{"reschedule without id", `{"v":1,"type":"booking.reschedule","request_id":"x","calendar_id":"s","reschedule":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z"}}`},
	{"reschedule without end", `{"v":1,"type":"booking.reschedule","request_id":"x","calendar_id":"s","booking_id":"tf11b2643s1m87jckbpma5mgak","reschedule":{"start":"2026-12-01T10:00:00Z"}}`},
	{"busy.set without body", `{"v":1,"type":"busy.set","request_id":"x","calendar_id":"s"}`},
	{"busy.set without end", `{"v":1,"type":"busy.set","request_id":"x","calendar_id":"s","busy":{"block_id":"b","start":"2026-12-01T10:00:00Z"}}`},
	{"busy.clear without block id", `{"v":1,"type":"busy.clear","request_id":"x","calendar_id":"s","busy":{}}`},
	{"busy.clear with a bad block id", `{"v":1,"type":"busy.clear","request_id":"x","calendar_id":"s","busy":{"block_id":"a b"}}`},
	{"series with count and until", `{"v":3,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":"c","recurrence":{"freq":"daily","count":2,"until":"2026-12-05T10:00:00Z"}}}`},
	{"series without an end", `{"v":3,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":"c","recurrence":{"freq":"daily"}}}`},
	{"series hourly", `{"v":3,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":"c","recurrence":{"freq":"hourly","count":2}}}`},
	{"series of 367", `{"v":3,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":"c","recurrence":{"freq":"daily","count":367}}}`},
	{"on_conflict maybe", `{"v":3,"type":"booking.create","request_id":"x","calendar_id":"s","booking":{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":"c","recurrence":{"freq":"daily","count":2},"on_conflict":"maybe"}}`},
	{"cancel with scope all", `{"v":3,"type":"booking.cancel","request_id":"x","calendar_id":"s","booking_id":"tf11b2643s1m87jckbpma5mgak","scope":"all"}`},
}

// TestSchemaRejectsInvalidCommands: the command schema refuses the invalid
// commands it can tell (schemaRejects), each of which the writer rejects
// too, and accepts each of them once repaired the way the test names.
func TestSchemaRejectsInvalidCommands(t *testing.T) {
	s := compileSchemas(t)
	for _, c := range schemaRejects {
		var env struct {
			CalendarID string `json:"calendar_id"`
		}
		_ = json.Unmarshal([]byte(c.body), &env)
		if env.CalendarID == "" {
			env.CalendarID = "s"
		}
		d := actor.Decode(actor.Input{Seq: 1, At: t0, SubjectCalendar: env.CalendarID, Data: []byte(c.body)})
		if d.Reject == nil {
			t.Errorf("%s: the writer accepts %s", c.name, c.body)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.command.Validate(inst) == nil {
			t.Errorf("%s: the schema accepts %s", c.name, c.body)
		}
	}
}

// TestProtocolDocExamples: the JSON examples of docs/protocol.md are what
// the schemas describe: replies and events validate against
// reply.schema.json, and commands against command.schema.json and the
// writer, which must accept them.
func TestProtocolDocExamples(t *testing.T) {
	s := compileSchemas(t)
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	blocks := strings.Split(string(doc), "```json\n")
	for _, blk := range blocks[1:] {
		blk, _, _ = strings.Cut(blk, "```")
		dec := json.NewDecoder(strings.NewReader(blk))
		for dec.More() {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				t.Fatalf("a JSON example of docs/protocol.md does not parse: %v\n%s", err, blk)
			}
			var env struct {
				Outcome    *string         `json:"outcome"`
				CalendarID string          `json:"calendar_id"`
				MsgID      string          `json:"msg_id"`
				Event      json.RawMessage `json:"event"`
			}
			if err := json.Unmarshal(raw, &env); err != nil {
				t.Fatal(err)
			}
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			if env.MsgID != "" && env.Event != nil {
				n["event batch line"]++
				if err := s.eventBatchLine.Validate(inst); err != nil {
					t.Errorf("event batch line example %s: %v", raw, err)
				}
				continue
			}
			if env.Outcome != nil {
				n["reply"]++
				if err := s.reply.Validate(inst); err != nil {
					t.Errorf("reply example %s: %v", raw, err)
				}
				continue
			}
			n["command"]++
			if err := s.command.Validate(inst); err != nil {
				t.Errorf("command example %s: %v", raw, err)
			}
			if d := actor.Decode(actor.Input{Seq: 1, At: t0, SubjectCalendar: env.CalendarID, Data: raw}); d.Reject != nil {
				t.Errorf("command example %s: the writer rejects it: %s %+v", raw, d.Reject.Message, d.Reject.Details)
			}
		}
	}
	if n["reply"] < 5 || n["command"] < 10 {
		t.Fatalf("examples found: %v", n)
	}
	t.Logf("examples checked: %v", n)
}

// TestProtocolDocFingerprints: each fingerprint example of docs/protocol.md
// (a command, "hashes" the JSON it says, "fingerprint" its hash) is right:
// the hash is that of the JSON shown, and the writer computes it for the
// command.
func TestProtocolDocFingerprints(t *testing.T) {
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, group := range strings.Split(string(doc), "\n\n") {
		body, rest, ok := strings.Cut(group, "\nhashes  ")
		if !ok {
			continue
		}
		body = strings.TrimPrefix(body, "```\n")
		hashed, rest, _ := strings.Cut(rest, "\n")
		fp, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimSuffix(rest, "```")), "fingerprint ")
		if !ok {
			t.Fatalf("a fingerprint example without its fingerprint:\n%s", group)
		}
		n++
		if sum := sha256.Sum256([]byte(hashed)); hex.EncodeToString(sum[:16]) != fp {
			t.Errorf("%s hashes to %x, not %s", hashed, sum[:16], fp)
		}
		var env struct {
			CalendarID string `json:"calendar_id"`
		}
		if err := json.Unmarshal([]byte(body), &env); err != nil {
			t.Fatalf("fingerprint example %s: %v", body, err)
		}
		d := actor.Decode(actor.Input{Seq: 1, At: t0, SubjectCalendar: env.CalendarID, Data: []byte(body)})
		if d.Reject != nil || d.Fingerprint != fp {
			t.Errorf("%s: the writer's fingerprint is %q (reject %+v), the document says %s", body, d.Fingerprint, d.Reject, fp)
		}
	}
	if n < 3 {
		t.Fatalf("%d fingerprint examples found", n)
	}
}
