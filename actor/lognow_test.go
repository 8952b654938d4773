package actor_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// TestLogTimeNeverGoesBackwards: the stream timestamp is the leader's wall
// clock, which can step back (a leader change, a clock correction). A
// partition's "now" is the latest timestamp it has decided with, so a hold
// that expired stays expired, a booking is never cancelled before it was
// created, and rules measured from now (notice) do not move back. The
// same log gives the same replies and index in one batch, in single
// messages, and across a restart of the index.
func TestLogTimeNeverGoesBackwards(t *testing.T) {
	h := newRuleHarness(t)
	t1 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	slot := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	var ins []actor.Input
	add := func(at time.Time, cmd actor.Command) { ins = append(ins, h.input(at, cmd)) }
	hold := bookingCmd("c", slot, time.Hour)
	hold.Type, hold.Booking.TTLSeconds = actor.TypeHoldCreate, 300
	hold.RequestID = "hold"
	holdID := actor.BookingID("c", "hold")
	book := bookingCmd("c", slot.Add(3*time.Hour), time.Hour)
	book.RequestID = "book"
	add(t1, calendarCmd("c", "UTC", data.Rules{MinNoticeMinutes: 60}))                                         // 0
	add(t1.Add(time.Minute), hold)                                                                             // 1: expires at t1+6m
	add(t1.Add(10*time.Minute), book)                                                                          // 2: created at t1+10m
	add(t1.Add(2*time.Minute), actor.Command{Type: actor.TypeHoldConfirm, CalendarID: "c", BookingID: holdID}) // 3: the clock stepped back
	add(t1.Add(2*time.Minute), bookingCmd("c", slot, time.Hour))                                               // 4: the hold's interval is free
	add(t1.Add(3*time.Minute), actor.Command{Type: actor.TypeBookingCancel, CalendarID: "c", BookingID: actor.BookingID("c", "book")})
	add(t1.Add(4*time.Minute), calendarCmd("c", "UTC", data.Rules{MinNoticeMinutes: 60})) // 6
	add(t1.Add(5*time.Minute), bookingCmd("c", t1.Add(65*time.Minute), time.Hour))        // 7: 55 min after log now
	add(t1.Add(20*time.Minute), bookingCmd("c", t1.Add(90*time.Minute), time.Hour))       // 8: the clock is ahead again

	want := applyInputs(t, h.s, 0, ins...)
	reply := func(i int) actor.Reply { return decodeReply(t, want[i].Reply) }
	wantCode(t, reply(3), actor.CodeHoldExpired)
	wantCode(t, reply(4), "")
	if r := reply(4); !r.Booking.CreatedAt.Equal(t1.Add(10 * time.Minute)) {
		t.Errorf("created_at %s, want the partition's log now %s", r.Booking.CreatedAt, t1.Add(10*time.Minute))
	}
	created, cancel := reply(2).Booking, reply(5)
	wantCode(t, cancel, "")
	if cancel.Booking.CancelledAt.Before(created.CreatedAt) {
		t.Errorf("cancelled_at %s before created_at %s", cancel.Booking.CancelledAt, created.CreatedAt)
	}
	if r := reply(6); r.Calendar.UpdatedAt.Before(reply(0).Calendar.UpdatedAt) || r.Calendar.UpdatedAt.Before(r.Calendar.CreatedAt) {
		t.Errorf("calendar updated_at went back: %+v", r.Calendar)
	}
	wantCode(t, reply(7), actor.CodeTooSoon)
	wantCode(t, reply(8), "")
	if r := reply(8); !r.Booking.CreatedAt.Equal(t1.Add(20 * time.Minute)) {
		t.Errorf("created_at %s after the clock caught up, want %s", r.Booking.CreatedAt, t1.Add(20*time.Minute))
	}
	viewTx(t, h.s, func(tx *data.Tx) {
		if got := tx.LogNow(0); !got.Equal(t1.Add(20 * time.Minute)) {
			t.Errorf("log now %s", got)
		}
		if bk, _ := tx.Booking("c", holdID); bk.Status != data.StatusExpired {
			t.Errorf("hold %s after the clock stepped back", bk.Status)
		}
	})
	wantDump := dumpStore(t, h.s, ins)

	// The same log one message per transaction, with the index closed and
	// opened again halfway (a restart), gives the same replies and index.
	path := t.TempDir() + "/index.db"
	s, err := data.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range ins {
		if i == 4 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = data.Open(path); err != nil {
				t.Fatal(err)
			}
		}
		if got := applyInputs(t, s, 0, in)[0]; !bytes.Equal(got.Reply, want[i].Reply) {
			t.Fatalf("message %d alone: %s\nin one batch: %s", i, got.Reply, want[i].Reply)
		}
	}
	if got := dumpStore(t, s, ins); got != wantDump {
		t.Errorf("index differs:\n%s", firstDiff(got, wantDump))
	}
	datatest.CheckInvariants(t, s)
	s.Close()
}

// TestRefusedUsesLogNow: a refusal from the index is decided at the wall
// clock's now, but never before the partition's log now: with a wall clock
// behind the stream's, a hold the writer has seen expire must not refuse a
// booking the writer would accept.
func TestRefusedUsesLogNow(t *testing.T) {
	h := newRuleHarness(t)
	t1 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	slot := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	h.do(t1, calendarCmd("c", "UTC", data.Rules{}))
	hold := bookingCmd("c", slot, time.Hour)
	hold.Type, hold.Booking.TTLSeconds = actor.TypeHoldCreate, 300
	wantCode(t, h.do(t1, hold), "")
	h.do(t1.Add(10*time.Minute), calendarCmd("c", "UTC", data.Rules{})) // log now: the hold expired
	cmd := bookingCmd("c", slot, time.Hour)
	cmd.V, cmd.RequestID = actor.SchemaVersion, "r"
	if errs := cmd.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	wall := t1.Add(2 * time.Minute) // this host's clock is behind
	viewTx(t, h.s, func(tx *data.Tx) {
		if reply, code, err := actor.Refused(tx, 0, &cmd, wall); code != "" || err != nil {
			t.Errorf("refused at a wall clock behind log now: %s %v", reply, err)
		}
	})
	wantCode(t, h.do(wall, cmd), "")
}

func viewTx(tb testing.TB, s *data.Store, fn func(*data.Tx)) {
	tb.Helper()
	if err := s.View(func(tx *data.Tx) error { fn(tx); return nil }); err != nil {
		tb.Fatal(err)
	}
}
