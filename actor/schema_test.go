package actor_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// newerCommands are messages a newer build may have published: a schema
// version above this build's, declared by the body's v or by the
// Bookline-Schema header, whatever else the body holds (fields this build
// does not know, fields of types it does not expect, a size it refuses).
func newerCommands(cal string) []actor.Input {
	next := actor.KnownSchemaVersion + 1
	valid := bookCmd(cal, "n1", at(600), at(660), "Ada")
	return []actor.Input{
		{SubjectCalendar: cal, Data: []byte(strings.Replace(valid, `"v":1`, fmt.Sprintf(`"v":%d`, next), 1))},
		{SubjectCalendar: cal, Data: []byte(fmt.Sprintf(`{"v":%d,"type":"booking.split","request_id":"n2","calendar_id":%q,"booking_id":7,"parts":[1,2]}`, next, cal))},
		{SubjectCalendar: cal, Data: []byte(fmt.Sprintf(`{"v":%d,"type":"booking.create","request_id":"n3","calendar_id":%q,"booking":{"start":"next tuesday"}}`, next, cal))},
		{SubjectCalendar: cal, Data: []byte(fmt.Sprintf(`{"v":%d,"request_id":"n4","calendar_id":%q,"blob":%q}`, next, cal, strings.Repeat("x", actor.MaxCommandBytes)))},
		{SubjectCalendar: cal, Data: []byte(fmt.Sprintf(`{"v":%d,"type":"booking.create"} and more`, next))},
		{SubjectCalendar: cal, Schema: fmt.Sprint(next), Data: []byte(strings.Replace(valid, `"n1"`, `"n6"`, 1))},
		{SubjectCalendar: cal, Schema: "99", Data: []byte(`not JSON at all: another encoding`)},
	}
}

// TestNewerSchemaIsNotDecided: a command of a schema version this build
// does not know is never decided by it. A newer build may accept it, so a
// rejection recorded here would make the indexes diverge: the message and
// everything after it in its partition are held (not applied, no reply,
// no record, no event, the applied sequence and log time stay), as often
// as they come, until a build that knows the version decides them.
func TestNewerSchemaIsNotDecided(t *testing.T) {
	for i, newer := range newerCommands("cal1") {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			h := newHarness(t)
			h.send("cal1", upsertCmd("cal1", "u", "n"))
			before := h.input("cal1", bookCmd("cal1", "b1", at(0), at(60), "Ada"))
			newer.Seq, newer.At = h.seq+1, t0.Add(time.Hour)
			h.seq++
			after := h.input("cal1", bookCmd("cal1", "b2", at(120), at(180), "Bob"))

			d := actor.Decode(newer)
			if d.Reject != nil || d.Fingerprint != "" || d.Newer <= actor.KnownSchemaVersion {
				t.Fatalf("decoded as %+v, reject %+v", d, d.Reject)
			}
			for range 2 { // held again when delivered again
				out := h.apply(before, newer, after)
				if out[0].Held || out[0].Decision == nil || !out[1].Held || !out[2].Held || out[1].Reply != nil || out[2].Reply != nil {
					t.Fatalf("outputs %+v", out)
				}
				var e *actor.NewerSchemaError
				if err := actor.Held(out, []actor.Decoded{actor.Decode(before), d, actor.Decode(after)}); !errors.As(err, &e) ||
					e.Seq != newer.Seq || e.Version != d.Newer || !strings.Contains(err.Error(), "upgrade") {
					t.Fatalf("Held: %v", err)
				}
			}
			h.view(func(tx *data.Tx) {
				if got := tx.AppliedSeq(0); got != before.Seq {
					t.Errorf("applied seq %d, want %d (before the newer command)", got, before.Seq)
				}
				if got := tx.LogNow(0); !got.Equal(before.At) {
					t.Errorf("log now %s: advanced by a held command", got)
				}
				for _, req := range []string{"n1", "n2", "n3", "n4", "n6", "b2"} {
					if _, ok, _ := tx.Request("cal1", req); ok {
						t.Errorf("request %s recorded", req)
					}
				}
				evs, err := tx.PendingEvents(100)
				if err != nil {
					t.Fatal(err)
				}
				for _, ev := range evs {
					if ev.Seq >= newer.Seq {
						t.Errorf("event queued for held seq %d", ev.Seq)
					}
				}
			})
		})
	}
}

// TestNewerSchemaAppliedElsewhereIsSkipped: a newer command at a sequence
// the index already applied (decided by a newer build, then redelivered to
// an older one) is skipped like any redelivery: nothing changes, nothing is
// answered, and the partition goes on.
func TestNewerSchemaAppliedElsewhereIsSkipped(t *testing.T) {
	h := newHarness(t)
	h.send("cal1", upsertCmd("cal1", "u", "n"))
	newer := newerCommands("cal1")[0]
	newer.Seq, newer.At = 1, t0 // at or below the applied sequence
	next := h.input("cal1", bookCmd("cal1", "b1", at(0), at(60), "Ada"))
	out := h.apply(newer, next)
	if !out[0].Skipped || out[0].Held || out[0].Reply != nil || out[1].Held || out[1].Decision == nil {
		t.Fatalf("outputs %+v", out)
	}
	if err := actor.Held(out, nil); err != nil {
		t.Fatal(err)
	}
}

// TestOlderSchemaStillRejected: a version below 1 (or none) is not a newer
// build's command but a broken one: rejected and recorded as before.
func TestOlderSchemaStillRejected(t *testing.T) {
	for _, v := range []string{`"v":0`, `"v":-1`, ``} {
		body := strings.Replace(bookCmd("cal1", "r1", at(0), at(60), "Ada"), `"v":1`, v, 1)
		body = strings.Replace(body, `{,`, `{`, 1)
		d := actor.Decode(actor.Input{Seq: 1, At: t0, SubjectCalendar: "cal1", Data: []byte(body)})
		if d.Newer != 0 || d.Reject == nil || d.Reject.Code != actor.CodeInvalidCommand {
			t.Errorf("%s: %+v", v, d)
		}
	}
	// A header that is not a version number says nothing.
	d := actor.Decode(actor.Input{Seq: 1, At: t0, SubjectCalendar: "cal1", Schema: "v2", Data: []byte(bookCmd("cal1", "r1", at(0), at(60), "Ada"))})
	if d.Newer != 0 || d.Reject != nil {
		t.Errorf("header v2: %+v", d)
	}
}
