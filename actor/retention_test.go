package actor_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// withTTL gives a command body a record retention (record_ttl_seconds).
func withTTL(body string, secs int) string {
	return strings.Replace(body, `{"v":1,`, fmt.Sprintf(`{"v":1,"record_ttl_seconds":%d,`, secs), 1)
}

// sendAt applies one new message stored at log time at.
func (h *harness) sendAt(cal, body string, at time.Time) (actor.Output, actor.Reply) {
	h.tb.Helper()
	h.seq++
	in := actor.Input{Seq: h.seq, At: at, SubjectCalendar: cal, Data: []byte(body), Partitions: h.partitions}
	h.log = append(h.log, in)
	out := h.apply(in)[0]
	return out, decodeReply(h.tb, out.Reply)
}

func digestOf(tb testing.TB, s *data.Store) data.Digest {
	tb.Helper()
	var d data.Digest
	if err := s.View(func(tx *data.Tx) (err error) { d, err = tx.Digest(); return err }); err != nil {
		tb.Fatal(err)
	}
	return d
}

// TestRecordsExpireByLogTime: a command with record_ttl_seconds has its
// request record until its log time plus the retention, exactly: a retry
// before that gets the recorded answer; the first command of the partition
// at or after it removes the record, and a retry then is a new request.
// Records without a retention stay. Applied one by one, in one batch, or
// replayed, the log gives the same index.
func TestRecordsExpireByLogTime(t *testing.T) {
	h := newHarness(t)
	ts := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	h.sendAt("cal1", upsertCmd("cal1", "u1", "n"), ts(1))
	keyless := withTTL(bookCmd("cal1", "r.a", at(60), at(120), "Ada"), 10)
	first, r := h.sendAt("cal1", keyless, ts(2)) // kept until ts(12)
	wantCode(t, r, "")
	kept, _ := h.sendAt("cal1", bookCmd("cal1", "k1", at(200), at(260), "Bob"), ts(3)) // no retention: forever
	expire := withTTL(`{"v":1,"type":"hold.expire","request_id":"expire.1","calendar_id":"cal1"}`, 5)
	h.sendAt("cal1", expire, ts(4)) // kept until ts(9)

	h.view(func(tx *data.Tx) {
		rec, ok, err := tx.Request("cal1", "r.a")
		if !ok || err != nil || !rec.Expires.Equal(ts(12)) || !bytes.Equal(recordJSON(t, rec), first.Reply) {
			t.Fatalf("record with a retention: %+v, %v, %v", rec, ok, err)
		}
		if rec, _, _ := tx.Request("cal1", "k1"); !rec.Expires.IsZero() {
			t.Errorf("record without a retention expires at %s", rec.Expires)
		}
	})
	// Within the retention a retry gets the recorded answer.
	if out, _ := h.sendAt("cal1", keyless, ts(11)); !bytes.Equal(out.Reply, first.Reply) {
		t.Errorf("retry within the retention\n%s\nwant\n%s", out.Reply, first.Reply)
	}
	present := func(req string) bool {
		var ok bool
		h.view(func(tx *data.Tx) { _, ok, _ = tx.Request("cal1", req) })
		return ok
	}
	filler := func(i int, at time.Time) {
		h.sendAt("cal1", cancelCmd("cal1", fmt.Sprintf("f%d", i), actor.BookingID("cal1", "none")), at)
	}
	filler(1, ts(12).Add(-time.Nanosecond))
	if !present("r.a") || present("expire.1") {
		t.Fatalf("one nanosecond before expiry: r.a present %v (want true), expire.1 present %v (want false)", present("r.a"), present("expire.1"))
	}
	filler(2, ts(12))
	if present("r.a") {
		t.Fatal("record still present at its expiry")
	}
	if !present("k1") {
		t.Fatal("a record without retention was removed")
	}
	// After the expiry the request id is free, but the booking it made is
	// still there: the retry is refused, not booked a second time.
	out, r := h.sendAt("cal1", keyless, ts(20))
	wantCode(t, r, actor.CodeIdempotencyKeyReused)
	if r.Seq != h.seq || bytes.Equal(out.Reply, first.Reply) {
		t.Errorf("retry after expiry answered from the old record: %s", out.Reply)
	}
	// The first message, redelivered now, has lost its answer: the record
	// under its request id is a later decision's, never to be sent as its.
	if again := h.apply(h.log[1])[0]; !again.Skipped || again.Decision != nil || again.Reply != nil {
		t.Errorf("redelivery after the record was replaced: %+v", again)
	}
	if r, _ := h.sendAt("cal1", bookCmd("cal1", "k1", at(200), at(260), "Bob"), ts(1e6)); !bytes.Equal(r.Reply, kept.Reply) {
		t.Errorf("keyed retry much later\n%s\nwant\n%s", r.Reply, kept.Reply)
	}

	// The same log, in one batch, one by one, and replayed: one index.
	live := digestOf(t, h.s)
	for name, apply := range map[string]func(*data.Tx, []actor.Decoded) ([]actor.Output, error){
		"apply":  func(tx *data.Tx, b []actor.Decoded) ([]actor.Output, error) { return actor.Apply(tx, 0, b) },
		"replay": func(tx *data.Tx, b []actor.Decoded) ([]actor.Output, error) { return actor.ApplyReplay(tx, 0, b) },
	} {
		for _, size := range []int{1, len(h.log)} {
			s := datatest.MustOpen(t)
			for i := 0; i < len(h.log); i += size {
				var batch []actor.Decoded
				for _, in := range h.log[i:min(i+size, len(h.log))] {
					batch = append(batch, actor.Decode(in))
				}
				if err := s.Commit(func(tx *data.Tx) error { _, err := apply(tx, batch); return err }); err != nil {
					t.Fatal(err)
				}
			}
			if got := digestOf(t, s); got.Total != live.Total {
				t.Errorf("%s in batches of %d: digest %v, live %v", name, size, got, live)
			}
		}
	}
}
