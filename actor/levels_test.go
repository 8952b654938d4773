package actor_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// The old log: testdata/rules-level-1.log.json is a partition's log of
// commands that the builds before rules levels decided in ways the strict
// rules refuse (duplicate keys, headers that are not canonical, invalid
// UTF-8, lone surrogates, a blank customer, -0, a year 0001 interval),
// then the version 2 marker, then the same inputs again.
// testdata/rules-level-1.golden.json is what the build of commit 79958ed
// (which knew only version 1) answered to each message of that log, one
// message per batch, where it stopped (the marker), and the digest of its
// index there: a test in actor/ of that build's tree applied the log and
// wrote it.

type oldLogEntry struct {
	Seq     uint64    `json:"seq"`
	At      time.Time `json:"at"`
	Subject string    `json:"subject"`
	Schema  string    `json:"schema,omitempty"`
	Data    []byte    `json:"data"`
	Note    string    `json:"note"`
}

type oldLogGolden struct {
	Build   string            `json:"build"`
	Replies map[string]string `json:"replies"`
	HeldAt  uint64            `json:"held_at"`
	Applied uint64            `json:"applied"`
	Digest  string            `json:"digest"`
}

// readOldLog reads testdata/<name>.log.json and testdata/<name>.golden.json.
func readOldLog(t *testing.T, name string) ([]actor.Input, []string, oldLogGolden) {
	t.Helper()
	var (
		entries []oldLogEntry
		golden  oldLogGolden
	)
	for name, v := range map[string]any{"testdata/" + name + ".log.json": &entries, "testdata/" + name + ".golden.json": &golden} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	ins := make([]actor.Input, len(entries))
	notes := make([]string, len(entries))
	for i, e := range entries {
		ins[i] = actor.Input{Seq: e.Seq, At: e.At, SubjectCalendar: e.Subject, Schema: e.Schema, Data: e.Data}
		notes[i] = e.Note
	}
	return ins, notes, golden
}

func totalOf(t *testing.T, s *data.Store) string { t.Helper(); return digestOf(t, s).Total }

// TestOldLogDecidedAsBefore: a log that builds before rules levels decided
// is decided the same by this build, byte for byte, up to the version 2
// marker (where those builds stop); after it the same inputs are refused by
// the strict rules. However the log is cut into batches, live or as a
// replay, the index is the same.
func TestOldLogDecidedAsBefore(t *testing.T) {
	ins, notes, golden := readOldLog(t, "rules-level-1")
	marker := golden.HeldAt
	if marker == 0 || golden.Applied != marker-1 {
		t.Fatalf("golden: held at %d, applied %d", marker, golden.Applied)
	}

	// One message per batch, as a writer that keeps up: the same answers
	// as the old build, and its index at the marker.
	s := datatest.MustOpen(t)
	replies := map[uint64][]byte{}
	for _, in := range ins {
		if in.Seq == marker {
			if got := totalOf(t, s); got != golden.Digest {
				t.Fatalf("index before the marker: digest %s, the old build's %s", got, golden.Digest)
			}
		}
		out := applyInputs(t, s, 0, in)[0]
		replies[in.Seq] = out.Reply
		if want, ok := golden.Replies[strconv.FormatUint(in.Seq, 10)]; ok && string(out.Reply) != want {
			t.Errorf("seq %d (%s):\n got %s\nwant %s (build %s)", in.Seq, notes[in.Seq-1], out.Reply, want, golden.Build)
		}
	}
	if len(golden.Replies) != int(marker-1) {
		t.Fatalf("golden has %d replies, want %d", len(golden.Replies), marker-1)
	}
	_ = s.View(func(tx *data.Tx) error {
		if got := tx.RulesLevel(0); got != 2 {
			t.Errorf("rules level %d after the marker, want 2", got)
		}
		return nil
	})

	// After the marker: the same inputs, refused by the strict rules.
	want := map[string]string{
		"dup":     `invalid_command: command is not valid strict JSON: duplicate key "customer"`,
		"dupv":    `invalid_command: command is not valid strict JSON: duplicate key "v"`,
		"hplus":   `invalid_command: the Bookline-Schema header "+2" is not a schema version (a positive integer in canonical decimal)`,
		"hhuge":   `invalid_command: the Bookline-Schema header "99999999999999999999999" is not a schema version (a positive integer in canonical decimal)`,
		"hzero":   `invalid_command: the Bookline-Schema header "01" is not a schema version (a positive integer in canonical decimal)`,
		"utf8":    `invalid_command: command is not valid strict JSON: invalid UTF-8 in a string`,
		"surr":    `invalid_command: command is not valid strict JSON: an escaped lone UTF-16 surrogate (\ud800) in a string`,
		"blank":   `invalid_request: invalid command [customer: is required]`,
		"meta":    `invalid_command: command is not valid strict JSON: duplicate key "a"`,
		"fold":    `invalid_command: command is not valid strict JSON: duplicate key "Customer"`,
		"negzero": `invalid_command: command is not valid strict JSON: -0 is not a number in canonical form`,
		"year1":   `invalid_request: invalid command [start: ` + actor.TimeRangeMessage + `; end: ` + actor.TimeRangeMessage + `]`,
		"name":    `invalid_command: command is not valid strict JSON: invalid UTF-8 in a string`,
		"ok":      `accepted`,
	}
	for _, in := range ins[marker:] {
		r := decodeReply(t, replies[in.Seq])
		var env struct {
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(in.Data, &env)
		name := strings.TrimPrefix(env.RequestID, "g1-")
		got := r.Outcome
		if r.Outcome == actor.OutcomeRejected {
			got = r.Code + ": " + r.Message
			if len(r.Details) > 0 {
				var ds []string
				for _, d := range r.Details {
					ds = append(ds, d.Field+": "+d.Message)
				}
				got += " [" + strings.Join(ds, "; ") + "]"
			}
		}
		if w, ok := want[name]; !ok || got != w {
			t.Errorf("seq %d %s (%s) after the marker: %s, want %s", in.Seq, name, notes[in.Seq-1], got, w)
		}
		var recorded bool
		_ = s.View(func(tx *data.Tx) (err error) { _, recorded, err = tx.Request("old", env.RequestID); return err })
		if recorded != (name == "ok") {
			t.Errorf("seq %d %s: recorded %v", in.Seq, name, recorded)
		}
	}
	// The first group's decisions stand: the last of two customers won,
	// the replaced character is stored.
	_ = s.View(func(tx *data.Tx) error {
		for req, customer := range map[string]string{"g0-dup": "Last", "g0-fold": "Bea", "g0-utf8": "Jos\uFFFD", "g0-blank": "   "} {
			bk, err := tx.Booking("old", actor.BookingID("old", req))
			if err != nil || bk.Customer != customer {
				t.Errorf("booking of %s: %q %v, want customer %q", req, bk.Customer, err, customer)
			}
		}
		return nil
	})

	// Replay equals live: the whole log in one batch, in random batches
	// (with redeliveries), and as a replay, gives the same index.
	live := totalOf(t, s)
	liveDump := dumpStore(t, s, ins)
	r := rand.New(rand.NewPCG(7, 8))
	for run := range 4 {
		s2 := datatest.MustOpen(t)
		switch run {
		case 0:
			applyInputs(t, s2, 0, ins...)
		case 1, 2:
			for _, b := range randomBatches(r, ins, run == 2) {
				applyInputs(t, s2, 0, b...)
			}
		case 3:
			batch := make([]actor.Decoded, len(ins))
			for i, in := range ins {
				batch[i] = decodeNoSkips(in)
			}
			if err := s2.Commit(func(tx *data.Tx) error { _, err := actor.ApplyReplay(tx, 0, batch); return err }); err != nil {
				t.Fatal(err)
			}
		}
		if got := totalOf(t, s2); got != live {
			t.Errorf("run %d: digest %s, live %s\n%s", run, got, live, firstDiff(liveDump, dumpStore(t, s2, ins)))
		}
	}
}

// TestSchemaNumbersCanonical: a schema version is read only in canonical
// decimal. What the builds before rules levels held (a header with a
// leading zero, two v of which the last is 2) was never decided, and is
// refused at once; what they decided ("+2", "2.0", "1e0", an out-of-range
// header were ignored) is decided the same at rules level 1 and refused
// from level 2 on. Nothing of it stops the partition.
func TestSchemaNumbersCanonical(t *testing.T) {
	valid := func(req string) string { return bookCmd("cal1", req, at(60), at(90), "Ada") }
	type input struct {
		name, header, body string
		level1             string // the answer at level 1: a code, or "accepted"
	}
	inputs := []input{
		{"header 02", "02", valid("h02"), actor.CodeInvalidCommand},
		{"header 002", "002", valid("h002"), actor.CodeInvalidCommand},
		{"header 03", "03", valid("h03"), actor.CodeInvalidCommand},
		{"header 2, body v 1", "2", valid("h2"), actor.CodeInvalidCommand},
		{"body v 1 then 2", "", strings.Replace(valid("v12"), `"v":1`, `"v":1,"v":2`, 1), actor.CodeInvalidCommand},
		{"body v 1 then V 2", "", strings.Replace(valid("v1V2"), `"v":1`, `"v":1,"V":2`, 1), actor.CodeInvalidCommand},
		{"body v 2.0", "", strings.Replace(valid("v20"), `"v":1`, `"v":2.0`, 1), actor.CodeInvalidCommand},
		{"header +2", "+2", valid("hplus"), actor.OutcomeAccepted},
		{"header 2.0", "2.0", valid("h20"), actor.OutcomeAccepted},
		{"header 1e0", "1e0", valid("h1e0"), actor.OutcomeAccepted},
		{"header huge", "99999999999999999999999", valid("hhuge"), actor.OutcomeAccepted},
		{"header 0", "0", valid("h0"), actor.OutcomeAccepted},
		{"header v2", "v2", valid("hv2"), actor.OutcomeAccepted},
		{"body v 2 then 1", "", strings.Replace(valid("v21"), `"v":1`, `"v":2,"v":1`, 1), actor.OutcomeAccepted},
		{"body v huge", "", strings.Replace(valid("vhuge"), `"v":1`, `"v":99999999999999999999999`, 1), actor.CodeInvalidCommand},
		{"body v 1e0", "", strings.Replace(valid("v1e0"), `"v":1`, `"v":1e0`, 1), actor.CodeInvalidCommand},
	}
	for _, level := range []int{1, 2} {
		for i, in := range inputs {
			t.Run(fmt.Sprintf("level %d %s", level, in.name), func(t *testing.T) {
				h := newHarness(t)
				h.send("cal1", upsertCmd("cal1", "u", "n"))
				if level == 2 {
					_, r := h.send("_bookline-0", `{"v":2,"type":"schema.upgrade","request_id":"schema-upgrade.2","calendar_id":"_bookline-0"}`)
					wantCode(t, r, "")
				}
				msg := h.input("cal1", strings.Replace(in.body, "Ada", fmt.Sprint("Ada", i), 1))
				msg.Schema = in.header
				out := h.apply(msg)[0]
				if out.Held {
					t.Fatalf("held: the partition stops")
				}
				r := decodeReply(t, out.Reply)
				got := r.Outcome
				if r.Outcome == actor.OutcomeRejected {
					got = r.Code
				}
				want := in.level1
				if level == 2 {
					want = actor.CodeInvalidCommand
				}
				if got != want {
					t.Fatalf("answered %s (%s), want %s", got, out.Reply, want)
				}
			})
		}
	}
	// What the version says still counts: a canonical 2 is decided (this
	// build knows it), a canonical 9 holds the partition.
	h := newHarness(t)
	h.send("cal1", upsertCmd("cal1", "u", "n"))
	_, r := h.send("cal1", strings.Replace(valid("v2"), `"v":1`, `"v":2`, 1))
	wantCode(t, r, "")
	three := h.input("cal1", strings.Replace(valid("v3"), `"v":1`, `"v":9`, 1))
	three.Schema = "9"
	if out := h.apply(three)[0]; !out.Held {
		t.Fatalf("version 9: %+v", out)
	}
}

// skipHarness is a partition's log with the skips it holds: what the
// queue's writers look up before they decide (Decoded.SetSkip).
type skipHarness struct {
	*harness
	skips map[uint64]*actor.Skip // skipped seq -> skip
}

func (h *skipHarness) decode(ins []actor.Input) []actor.Decoded {
	out := make([]actor.Decoded, len(ins))
	for i, in := range ins {
		out[i] = actor.Decode(in)
		if out[i].SkipCandidate() {
			out[i].SetSkip(h.skips[in.Seq])
		}
	}
	return out
}

func (h *skipHarness) applyWith(s *data.Store, apply func(*data.Tx, int, []actor.Decoded) ([]actor.Output, error), ins ...actor.Input) []actor.Output {
	h.tb.Helper()
	batch := h.decode(ins)
	var out []actor.Output
	if err := s.Commit(func(tx *data.Tx) (err error) { out, err = apply(tx, 0, batch); return err }); err != nil {
		h.tb.Fatal(err)
	}
	if err := actor.Render(out); err != nil {
		h.tb.Fatal(err)
	}
	return out
}

// TestSkipDecidedAlikeByEveryBuild: a command of a version this build
// does not know holds the partition until a partition.skip names it. Then
// it is answered command_skipped (not recorded, an outcome event), the
// partition goes on, and the skip, reached in order, is accepted and
// recorded. Every replay, in any batches, by this build and by a build
// that knows the skipped command's version, gives the same index; without
// the skip such a build would have decided the command.
func TestSkipDecidedAlikeByEveryBuild(t *testing.T) {
	h := &skipHarness{harness: newHarness(t), skips: map[uint64]*actor.Skip{}}
	upsert := h.input("cal1", upsertCmd("cal1", "u", "n"))
	newer := h.input("cal1", strings.Replace(bookCmd("cal1", "n3", at(0), at(60), "Ada"), `"v":1`, `"v":9`, 1))
	after := h.input("cal1", bookCmd("cal1", "b1", at(0), at(60), "Bob"))
	skipBody := func(req string, seq uint64) string {
		return fmt.Sprintf(`{"v":2,"type":"partition.skip","request_id":%q,"calendar_id":"_bookline-0","skip":{"seq":%d}}`, req, seq)
	}
	skip := h.input("_bookline-0", skipBody("skip.2", newer.Seq))
	again := h.input("_bookline-0", skipBody("skip.2.again", newer.Seq))
	decided := h.input("_bookline-0", skipBody("skip.3", after.Seq))
	log := []actor.Input{upsert, newer, after, skip, again, decided}

	live := h.s
	out := h.applyWith(live, actor.Apply, upsert, newer, after)
	if out[0].Held || !out[1].Held || !out[2].Held {
		t.Fatalf("before the skip: %+v", out)
	}
	// The skip is in the log now (the writer finds it ahead).
	h.skips[newer.Seq] = &actor.Skip{Seq: skip.Seq, RequestID: "skip.2"}
	out = h.applyWith(live, actor.Apply, newer, after, skip, again, decided)
	r := decodeReply(t, out[0].Reply)
	if r.Code != actor.CodeCommandSkipped || out[0].OperatorSkip == nil || out[0].OperatorSkip.Seq != skip.Seq ||
		!strings.Contains(r.Message, `partition.skip at stream seq 4, request id "skip.2"`) || r.RequestID != "" || r.Seq != newer.Seq {
		t.Fatalf("skipped command: %s %+v", out[0].Reply, out[0])
	}
	wantCode(t, decodeReply(t, out[1].Reply), "")
	wantCode(t, decodeReply(t, out[2].Reply), "")
	r = decodeReply(t, out[3].Reply)
	if r.Code != actor.CodeNotStopped || !strings.Contains(r.Message, "skipped by the partition.skip at stream seq 4, not by this one") {
		t.Fatalf("second skip: %s", out[3].Reply)
	}
	wantCode(t, decodeReply(t, out[4].Reply), actor.CodeNotStopped)
	h.view(func(tx *data.Tx) {
		if by, ok := tx.SkippedBy(0, newer.Seq); !ok || by != skip.Seq {
			t.Errorf("skipped by %d %v", by, ok)
		}
		if _, ok, _ := tx.Request("cal1", "n3"); ok {
			t.Error("the skipped command is recorded")
		}
		for _, req := range []string{"skip.2", "skip.2.again", "skip.3"} {
			if _, ok, _ := tx.Request("_bookline-0", req); !ok {
				t.Errorf("skip %s not recorded", req)
			}
		}
		evs, _ := tx.PendingEvents(100)
		found := false
		for _, ev := range evs {
			found = found || ev.Seq == newer.Seq && ev.Calendar == "cal1"
		}
		if !found {
			t.Error("no outcome event for the skipped command")
		}
	})
	// Redelivered: answered as skipped again.
	if out := h.applyWith(live, actor.Apply, newer); !out[0].Skipped || decodeReply(t, out[0].Reply).Code != actor.CodeCommandSkipped {
		t.Fatalf("redelivered skipped command: %+v %s", out[0], out[0].Reply)
	}
	want := totalOf(t, live)

	replay := func(name string, batches [][]actor.Input) string {
		s := datatest.MustOpen(t)
		for _, b := range batches {
			h.applyWith(s, actor.ApplyReplay, b...)
		}
		return totalOf(t, s)
	}
	if got := replay("one batch", [][]actor.Input{log}); got != want {
		t.Errorf("replay in one batch: %s, live %s", got, want)
	}
	r2 := rand.New(rand.NewPCG(3, 4))
	if got := replay("random", randomBatches(r2, log, false)); got != want {
		t.Errorf("replay in random batches: %s, live %s", got, want)
	}
	// A build that knows version 9 skips it too.
	restore := actor.SetKnownSchemaVersionForTest(9)
	defer restore()
	if d := actor.Decode(newer); d.Newer != 0 || d.Reject != nil {
		t.Fatalf("a version 9 build does not decide version 9: %+v", d)
	}
	if got := replay("knows v5", [][]actor.Input{log}); got != want {
		t.Errorf("replay by a build that knows version 9: %s, live %s", got, want)
	}
	delete(h.skips, newer.Seq)
	if got := replay("knows v5, no skip", [][]actor.Input{log}); got == want {
		t.Error("without the skip a build that knows version 9 decides as if skipped: the test proves nothing")
	}
}

// TestSkipOnlyAboveTheLevel: a skip acts only on a command that declares a
// version above the partition's rules level (only such a command can have
// stopped a build); one naming any other command is refused not_stopped,
// and so is a skip that names a later command.
func TestSkipOnlyAboveTheLevel(t *testing.T) {
	h := &skipHarness{harness: newHarness(t), skips: map[uint64]*actor.Skip{}}
	upsert := h.input("cal1", upsertCmd("cal1", "u", "n"))
	book := h.input("cal1", bookCmd("cal1", "b1", at(0), at(60), "Bob"))
	skip := h.input("_bookline-0", fmt.Sprintf(`{"v":2,"type":"partition.skip","request_id":"s","calendar_id":"_bookline-0","skip":{"seq":%d}}`, book.Seq))
	ahead := h.input("_bookline-0", `{"v":2,"type":"partition.skip","request_id":"s9","calendar_id":"_bookline-0","skip":{"seq":9}}`)
	bad := h.input("_bookline-0", `{"v":2,"type":"partition.skip","request_id":"s0","calendar_id":"_bookline-0","skip":{"seq":"x"}}`)
	v1 := h.input("_bookline-0", `{"v":1,"type":"partition.skip","request_id":"s1","calendar_id":"_bookline-0","skip":{"seq":2}}`)
	h.skips[book.Seq] = &actor.Skip{Seq: skip.Seq, RequestID: "s"} // as a lookup would find it
	out := h.applyWith(h.s, actor.Apply, upsert, book, skip, ahead, bad, v1)
	wantCode(t, decodeReply(t, out[1].Reply), "")
	wantCode(t, decodeReply(t, out[2].Reply), actor.CodeNotStopped)
	wantCode(t, decodeReply(t, out[3].Reply), actor.CodeNotStopped)
	if r := decodeReply(t, out[4].Reply); r.Code != actor.CodeInvalidRequest || len(r.Details) != 1 || r.Details[0].Field != "skip.seq" {
		t.Errorf("skip without a seq: %s", out[4].Reply)
	}
	if r := decodeReply(t, out[5].Reply); r.Code != actor.CodeInvalidCommand || !slices.ContainsFunc(r.Details, func(e actor.FieldError) bool { return e.Field == "type" }) {
		t.Errorf("a version 1 partition.skip: %s", out[5].Reply)
	}
}

// skipsIn finds the skips in a partition's log as the queue's writers do:
// each command a valid version 2 partition.skip names (before it), with
// the first skip that names it.
func skipsIn(log []actor.Input) map[uint64]*actor.Skip {
	skips := map[uint64]*actor.Skip{}
	for _, in := range log {
		d := actor.Decode(in)
		if d.Reject != nil || d.Newer > 0 || d.Cmd.V != 2 || d.Cmd.Type != actor.TypePartitionSkip {
			continue
		}
		if t := d.Cmd.Skip.Seq; t < in.Seq && skips[t] == nil {
			skips[t] = &actor.Skip{Seq: in.Seq, RequestID: d.Cmd.RequestID}
		}
	}
	return skips
}
