package actor_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// calendarsOf returns k calendar ids that actor.PartitionOf puts in
// partition p of n, and k that it puts elsewhere.
func calendarsOf(p, n, k int) (in, out []string) {
	for i := 0; len(in) < k || len(out) < k; i++ {
		c := fmt.Sprint("m", i)
		if actor.PartitionOf(c, n) == p {
			in = append(in, c)
		} else {
			out = append(out, c)
		}
	}
	return in[:k], out[:k]
}

// commitsCmd is a collective.commits of v under request req to token.
func commitsCmd(tb testing.TB, v int, token, req string, entries []actor.CommitEntry) string {
	cmd := actor.CommitsCommand(token, req, entries, 0)
	cmd.V = v
	b, err := json.Marshal(cmd)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func entry(cal, req string, ids []string) actor.CommitEntry {
	return actor.CommitEntry{CalendarID: cal, ID: actor.CollectiveID(ids, req), CalendarIDs: ids}
}

func partStatus(h *harness, cal, id string) string {
	st := "none"
	h.view(func(tx *data.Tx) {
		if bk, err := tx.Booking(cal, id); err == nil {
			st = bk.Status
		}
	})
	return st
}

// TestCollectiveCommits: one collective.commits applies each entry as a
// collective.commit of that part would (confirmed, mirrored, an outcome
// event of the commit's shape on the part's calendar), leaves a part
// committed before as it is, and does not apply an entry of an aborted
// or missing part, of a collective hold, or of another partition's
// calendar (that part stays pending: a writer never touches another
// partition's calendars). It is recorded like any command, and deciding
// the same entries again changes nothing and announces nothing.
func TestCollectiveCommits(t *testing.T) {
	const n, p = 4, 1
	mine, other := calendarsOf(p, n, 2)
	a, b, o := mine[0], mine[1], other[0]
	h := newHarness(t)
	h.part, h.partitions = p, n
	logged := &loggedHarness{h}
	token := actor.CommitsToken(p, n)
	if actor.PartitionOf(token, n) != p || !strings.HasPrefix(token, actor.CommitsTokenPrefix) {
		t.Fatalf("token %q of partition %d", token, p)
	}
	logged.send(a, `{"v":1,"type":"calendar.upsert","request_id":"ua","calendar_id":"`+a+`","calendar":{"name":"A","timezone":"UTC","google":{"calendar_id":"a@example.com"}}}`)
	for _, c := range []string{b, o} {
		logged.send(c, upsertCmd(c, "u"+c, c))
	}
	ab, ao := []string{a, b}, []string{a, o}
	slices.Sort(ab)
	slices.Sort(ao)
	for i, req := range []string{"k2", "k3"} {
		for _, c := range ab {
			logged.send(c, prepareCmd(c, req, ab, at(60+120*i), at(120+120*i)))
		}
	}
	for _, c := range ao { // o's part is here only to see it left alone
		logged.send(c, prepareCmd(c, "k1", ao, at(600), at(660)))
	}
	logged.send(a, prepareCmd(a, "k4", ab, at(700), at(760)))
	logged.send(a, stepCmd(actor.TypeCollectiveAbort, a, "k4", ab, at(700), at(760)))
	held := strings.Replace(prepareCmd(b, "k6", ab, at(800), at(860)), `"calendar_ids":["`+ab[0]+`","`+ab[1]+`"]}`,
		`"calendar_ids":["`+ab[0]+`","`+ab[1]+`"],"hold":true}`, 1)
	if _, r := logged.send(b, held); r.Booking == nil || r.Booking.ExpiresAt == nil {
		t.Fatalf("held prepare: %+v", r)
	}

	entries := []actor.CommitEntry{
		entry(a, "k2", ab), entry(b, "k2", ab), entry(a, "k3", ab), entry(b, "k3", ab),
		entry(a, "k2", ab), // a duplicate: committed just before
		entry(a, "k4", ab), // aborted
		entry(b, "k5", ab), // no part
		entry(b, "k6", ab), // a hold's part
		entry(o, "k1", ao), // another partition's calendar
		entry(a, "k1", ao),
	}
	body := commitsCmd(t, 5, token, "batch-1", entries)
	out, r := logged.send(token, body)
	wantCode(t, r, "")
	if r.Type != actor.TypeCollectiveCommits || r.Message != "5 parts committed, 1 decided before, 4 not committed" {
		t.Fatalf("reply %+v", r)
	}
	var refused []string
	for _, d := range r.Details {
		refused = append(refused, d.Field+" "+strings.SplitN(d.Message, ":", 2)[0])
	}
	want := []string{"commits[5] collective_aborted", "commits[6] booking_not_found", "commits[7] collective_pending", "commits[8] invalid_request"}
	if !slices.Equal(refused, want) {
		t.Fatalf("not committed %v, want %v", refused, want)
	}
	for _, e := range entries[:4] {
		if st := partStatus(h, e.CalendarID, e.ID); st != data.StatusConfirmed {
			t.Fatalf("%s/%s: %s", e.CalendarID, e.ID, st)
		}
	}
	for _, e := range []actor.CommitEntry{entries[7], entries[8]} {
		if st := partStatus(h, e.CalendarID, e.ID); st != data.StatusPending {
			t.Fatalf("%s/%s: %s, want pending (not applied)", e.CalendarID, e.ID, st)
		}
	}
	if st := partStatus(h, a, entries[5].ID); st != data.StatusAborted {
		t.Fatalf("aborted part: %s", st)
	}

	// One event per committed part, each a collective.commit's reply on
	// its calendar; a's parts are mirrored, each its own operation.
	parts := eventParts(t, h, out.Seq)
	var got []string
	for _, part := range parts {
		var ev actor.Reply
		if err := json.Unmarshal(part.JSON, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != actor.TypeCollectiveCommit || ev.Outcome != actor.OutcomeAccepted || ev.CalendarID != part.Calendar ||
			ev.RequestID != actor.CommitRequestID(ev.Booking.ID) || ev.Booking.Status != data.StatusConfirmed || ev.Seq != out.Seq {
			t.Fatalf("event %s", part.JSON)
		}
		got = append(got, part.Calendar+"/"+ev.Booking.ID)
	}
	wantEv := []string{a + "/" + entries[0].ID, b + "/" + entries[1].ID, a + "/" + entries[2].ID, b + "/" + entries[3].ID, a + "/" + entries[9].ID}
	if !slices.Equal(got, wantEv) {
		t.Fatalf("events %v, want %v", got, wantEv)
	}
	h.view(func(tx *data.Tx) {
		q, err := tx.PendingSync(a, 10)
		if err != nil || len(q) != 3 {
			t.Fatalf("a's mirror operations: %+v %v", q, err)
		}
	})

	// The same request again: its recorded answer. The same entries under
	// another request id: nothing to commit, no event.
	_, again := logged.send(token, body)
	if again.Message != r.Message || len(again.Details) != len(r.Details) {
		t.Fatalf("the same batch again: %+v", again)
	}
	out2, r2 := logged.send(token, commitsCmd(t, 5, token, "batch-2", entries))
	if r2.Message != "0 parts committed, 6 decided before, 4 not committed" {
		t.Fatalf("the entries again: %+v", r2)
	}
	if parts := eventParts(t, h, out2.Seq); parts != nil {
		t.Fatalf("events of a batch that committed nothing: %+v", parts)
	}

	// Replay equals live.
	replayed := datatest.MustOpen(t)
	applyInputs(t, replayed, p, h.log...)
	if live, got := digestOf(t, h.s), digestOf(t, replayed); live.Total != got.Total {
		cal, _ := data.FirstDifference(live, got)
		t.Fatalf("replay differs from live, first at %q", cal)
	}
}

// loggedHarness sends as harness.send does, keeping the log for a replay.
type loggedHarness struct{ h *harness }

func (l *loggedHarness) send(cal, body string) (actor.Output, actor.Reply) {
	l.h.tb.Helper()
	return l.h.sendAt(cal, body, t0.Add(time.Duration(l.h.seq+1)*time.Second))
}

// eventParts reads the outcome events the command at seq left in the
// outbox (nil: none).
func eventParts(t *testing.T, h *harness, seq uint64) []actor.EventPart {
	t.Helper()
	var parts []actor.EventPart
	h.view(func(tx *data.Tx) {
		evs, err := tx.PendingEvents(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Seq == seq {
				if parts, err = actor.EventParts(ev.Payload); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	return parts
}

// TestCollectiveCommitsValidation: the command's shape is checked before
// it is decided; before version 5 its type is unknown, as the builds of
// version 4 decided it; and a writer that was not told the partition
// count refuses to decide it at all rather than guess.
func TestCollectiveCommitsValidation(t *testing.T) {
	const n, p = 2, 0
	mine, _ := calendarsOf(p, n, 2)
	ids := slices.Sorted(slices.Values(mine))
	token := actor.CommitsToken(p, n)
	ok := entry(ids[0], "k", ids)
	many := make([]actor.CommitEntry, actor.MaxCommitEntries+1)
	for i := range many {
		many[i] = ok
	}
	tests := []struct {
		name, body, code, field string
	}{
		{"version 4", commitsCmd(t, 4, token, "r", []actor.CommitEntry{ok}), actor.CodeInvalidCommand, "type"},
		{"no entries", commitsCmd(t, 5, token, "r", nil), actor.CodeInvalidRequest, "commits"},
		{"too many", commitsCmd(t, 5, token, "r", many), actor.CodeInvalidRequest, "commits"},
		{"not a list", `{"v":5,"type":"collective.commits","request_id":"r","calendar_id":"` + token + `","commits":{"a":1}}`, actor.CodeInvalidRequest, "commits"},
		{"bad id", commitsCmd(t, 5, token, "r", []actor.CommitEntry{{CalendarID: ids[0], ID: "x", CalendarIDs: ids}}), actor.CodeInvalidRequest, "commits[0].id"},
		{"unsorted", commitsCmd(t, 5, token, "r", []actor.CommitEntry{{CalendarID: ids[0], ID: ok.ID, CalendarIDs: []string{ids[1], ids[0]}}}), actor.CodeInvalidRequest, "commits[0].calendar_ids"},
		{"not a member", commitsCmd(t, 5, token, "r", []actor.CommitEntry{{CalendarID: "zz", ID: ok.ID, CalendarIDs: ids}}), actor.CodeInvalidRequest, "commits[0].calendar_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.part, h.partitions = p, n
			_, r := h.send(token, tc.body)
			wantCode(t, r, tc.code)
			if !slices.ContainsFunc(r.Details, func(d actor.FieldError) bool { return d.Field == tc.field }) {
				t.Fatalf("details %+v, want field %s", r.Details, tc.field)
			}
		})
	}
	// A command of version 4 with a member named commits is decided
	// without it.
	h := newHarness(t)
	_, r := h.send(ids[0], `{"v":4,"type":"calendar.upsert","request_id":"u","calendar_id":"`+ids[0]+`","calendar":{"name":"A","timezone":"UTC"},"commits":7}`)
	wantCode(t, r, "")

	// Without the partition count the writer cannot tell whose calendars
	// it may touch: the batch is not decided.
	s := datatest.MustOpen(t)
	in := actor.Input{Seq: 1, At: t0, SubjectCalendar: token, Data: []byte(commitsCmd(t, 5, token, "r", []actor.CommitEntry{ok}))}
	d := actor.Decode(in)
	d.SetSkip(nil)
	err := s.Commit(func(tx *data.Tx) error { _, err := actor.Apply(tx, p, []actor.Decoded{d}); return err })
	if err == nil || !strings.Contains(err.Error(), "partition count") {
		t.Fatalf("decided without a partition count: %v", err)
	}
}
