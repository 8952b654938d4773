package actor_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// TestRefusedAgreesWithWriter runs a random log over calendars with rules,
// buffers, seats, holds and busy time. Before each booking.create is applied,
// Refused answers it from the committed state at the command's time; the
// writer must then decide the same: a refusal with the same reply (but for
// the sequence), or an acceptance where Refused could not refuse.
func TestRefusedAgreesWithWriter(t *testing.T) {
	h := newRuleHarness(t)
	r := rand.New(rand.NewPCG(11, 12))
	berlin := mustLoc(t, "Europe/Berlin")
	open := map[string][]data.TimeRange{}
	for _, d := range []string{"mon", "tue", "wed", "thu", "fri"} {
		open[d] = []data.TimeRange{{Start: "08:00", End: "18:00"}}
	}
	rules := []data.Rules{
		{},
		{BufferBeforeMinutes: 15, BufferAfterMinutes: 10},
		{Capacity: 2},
		{WeeklyHours: open, SlotStepMinutes: 15, MinNoticeMinutes: 120, HorizonDays: 3, MaxDurationMinutes: 180},
		{Capacity: 3, BufferAfterMinutes: 30, AllowedDurationsMinutes: []int{30, 60, 90}, MaxHoldTTLSeconds: 3600},
	}
	cals := []string{"p0", "p1", "p2", "p3", "p4"}
	now := time.Date(2026, 3, 2, 6, 0, 0, 0, time.UTC) // a Monday
	for i, cal := range cals {
		h.do(now, calendarCmd(cal, "Europe/Berlin", rules[i]))
	}
	var ids []string // bookings and holds made, by id
	calOf := map[string]string{}
	codes := map[string]int{}
	accepted := 0
	// both asks Refused, then the writer, and compares their answers.
	both := func(i int, cmd actor.Command) {
		t.Helper()
		cmd.V, cmd.RequestID = actor.SchemaVersion, fmt.Sprintf("b-%d", i)
		if errs := cmd.Validate(); len(errs) > 0 {
			t.Fatalf("generated an invalid command: %v", errs)
		}
		var refusal []byte
		var code string
		err := h.s.View(func(tx *data.Tx) error {
			var err error
			refusal, code, err = actor.Refused(tx, 0, &cmd, now)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		got := h.do(now, cmd)
		if got.Outcome == actor.OutcomeAccepted {
			if code != "" {
				t.Fatalf("command %d (%s): Refused refused (%s) what the writer accepted", i, cmd.Type, refusal)
			}
			accepted++
			ids = append(ids, got.Booking.ID)
			calOf[got.Booking.ID] = cmd.CalendarID
			return
		}
		if code != got.Code {
			t.Fatalf("command %d (%s): Refused gave code %q, the writer %q (%s)", i, cmd.Type, code, got.Code, got.Message)
		}
		var pre actor.Reply
		if err := json.Unmarshal(refusal, &pre); err != nil {
			t.Fatal(err)
		}
		if pre.Seq != 0 {
			t.Fatalf("refusal from the index has seq %d", pre.Seq)
		}
		pre.Seq = got.Seq
		if a, b := mustJSON(t, pre), mustJSON(t, got); a != b {
			t.Fatalf("command %d (%s): Refused answered\n%s\nthe writer\n%s", i, cmd.Type, a, b)
		}
		codes[cmd.Type+" "+code]++
	}
	for i := range 3000 {
		now = now.Add(time.Duration(r.IntN(20*60)) * time.Second)
		cal := cals[r.IntN(len(cals))]
		if r.IntN(40) == 0 {
			cal = "nowhere" // never created
		}
		start := now.Add(time.Duration(15*r.IntN(4*24*4)) * time.Minute).Truncate(15 * time.Minute).In(berlin)
		dur := time.Duration(15*(1+r.IntN(8))) * time.Minute
		switch x := r.IntN(100); {
		case x < 60:
			both(i, bookingCmd(cal, start, dur))
		case x < 72:
			cmd := bookingCmd(cal, start, dur)
			cmd.Type = actor.TypeHoldCreate
			cmd.Booking.TTLSeconds = 60 * (1 + r.IntN(90)) // over the maximum of p4 (an hour) too
			both(i, cmd)
		case x < 85 && len(ids) > 0:
			id := ids[r.IntN(len(ids))]
			typ := actor.TypeBookingCancel
			if r.IntN(2) == 0 {
				typ = actor.TypeHoldRelease
			}
			h.do(now, actor.Command{Type: typ, CalendarID: calOf[id], BookingID: id})
		case x < 92:
			h.do(now, actor.Command{Type: actor.TypeBusySet, CalendarID: cal, Busy: &actor.BusySpec{BlockID: fmt.Sprintf("blk%d", r.IntN(5)), Start: start, End: start.Add(dur)}})
		case x < 96:
			h.do(now, actor.Command{Type: actor.TypeBusyClear, CalendarID: cal, Busy: &actor.BusySpec{BlockID: fmt.Sprintf("blk%d", r.IntN(5))}})
		default:
			// Buffers change: decisions from now on follow the new
			// ones, bookings keep theirs. (Not the capacity: the
			// index invariants check bookings against today's.)
			k := r.IntN(len(cals))
			nr := rules[k]
			nr.BufferBeforeMinutes, nr.BufferAfterMinutes = 5*r.IntN(4), 5*r.IntN(4)
			h.do(now, calendarCmd(cals[k], "Europe/Berlin", nr))
		}
	}
	t.Logf("accepted %d, refused by code %v", accepted, codes)
	for _, c := range []string{actor.CodeSlotTaken, actor.CodeBufferConflict, actor.CodeExternalBusy, actor.CodeCalendarNotFound,
		actor.CodeOutsideHours, actor.CodeTooSoon, actor.CodeTooFar, actor.CodeDurationNotAllowed} {
		if c := actor.TypeBookingCreate + " " + c; codes[c] < 3 {
			t.Errorf("the log refused %q only %d times: it does not exercise Refused", c, codes[c])
		}
	}
	for _, c := range []string{actor.CodeSlotTaken, actor.CodeCalendarNotFound, actor.CodeInvalidRequest} {
		if c := actor.TypeHoldCreate + " " + c; codes[c] < 3 {
			t.Errorf("the log refused %q only %d times: it does not exercise Refused", c, codes[c])
		}
	}
	if accepted < 100 {
		t.Errorf("only %d bookings accepted", accepted)
	}
}

// TestRefusedOnlyCreates: commands other than booking.create and hold.create
// are left to the writer, even where it refuses them.
func TestRefusedOnlyCreates(t *testing.T) {
	h := newRuleHarness(t)
	now := time.Date(2026, 3, 2, 6, 0, 0, 0, time.UTC)
	start := now.Add(time.Hour)
	for _, cmd := range []actor.Command{
		{Type: actor.TypeBookingCancel, CalendarID: "none", BookingID: actor.BookingID("none", "x")},
		{Type: actor.TypeHoldConfirm, CalendarID: "none", BookingID: actor.BookingID("none", "x")},
		{Type: actor.TypeBookingReschedule, CalendarID: "none", BookingID: actor.BookingID("none", "x"), Booking: &actor.BookingSpec{Start: start, End: start.Add(time.Hour)}},
	} {
		cmd.V, cmd.RequestID = actor.SchemaVersion, "q-"+cmd.Type
		err := h.s.View(func(tx *data.Tx) error {
			reply, code, err := actor.Refused(tx, 0, &cmd, now)
			if code != "" || reply != nil {
				t.Errorf("%s: %q %q", cmd.Type, reply, code)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := h.do(now, cmd); got.Outcome != actor.OutcomeRejected {
			t.Fatalf("%s: the writer %+v", cmd.Type, got)
		}
	}
}
