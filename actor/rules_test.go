package actor_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// ruleHarness applies commands at chosen log times.
type ruleHarness struct {
	tb  testing.TB
	s   *data.Store
	seq uint64
	n   int
}

func newRuleHarness(tb testing.TB) *ruleHarness {
	return &ruleHarness{tb: tb, s: datatest.MustOpen(tb)}
}

func (h *ruleHarness) input(now time.Time, cmd actor.Command) actor.Input {
	h.tb.Helper()
	h.seq++
	h.n++
	cmd.V = actor.SchemaVersion
	if cmd.RequestID == "" {
		cmd.RequestID = fmt.Sprintf("req-%d", h.n)
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		h.tb.Fatal(err)
	}
	return actor.Input{Seq: h.seq, At: now, SubjectCalendar: cmd.CalendarID, Data: b}
}

// do applies cmd at log time now and returns the decided reply.
func (h *ruleHarness) do(now time.Time, cmd actor.Command) actor.Reply {
	h.tb.Helper()
	out := applyInputs(h.tb, h.s, 0, h.input(now, cmd))[0]
	return decodeReply(h.tb, out.Reply)
}

var errRollback = errors.New("rollback")

// try decides cmd at now in a transaction that is rolled back.
func (h *ruleHarness) try(now time.Time, cmd actor.Command) actor.Reply {
	h.tb.Helper()
	d := actor.Decode(h.input(now, cmd))
	var out []actor.Output
	err := h.s.Commit(func(tx *data.Tx) error {
		var err error
		if out, err = actor.Apply(tx, 0, []actor.Decoded{d}); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		h.tb.Fatalf("try: %v", err)
	}
	return decodeReply(h.tb, out[0].Reply)
}

func calendarCmd(cal, tz string, r data.Rules) actor.Command {
	return actor.Command{Type: actor.TypeCalendarUpsert, CalendarID: cal, Calendar: &actor.CalendarSpec{Timezone: tz, Rules: r}}
}

func bookingCmd(cal string, start time.Time, d time.Duration) actor.Command {
	return actor.Command{Type: actor.TypeBookingCreate, CalendarID: cal, Booking: &actor.BookingSpec{Start: start, End: start.Add(d), Customer: "c"}}
}

func mustLoc(tb testing.TB, name string) *time.Location {
	tb.Helper()
	l, err := zones.Load(name) // the data the writer decides with
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func TestRulesTable(t *testing.T) {
	berlin := mustLoc(t, "Europe/Berlin")
	local := func(y int, m time.Month, d, hh, mm int) time.Time { return time.Date(y, m, d, hh, mm, 0, 0, berlin) }
	rules := data.Rules{
		WeeklyHours: map[string][]data.TimeRange{
			"mon": {{Start: "09:00", End: "12:00"}, {Start: "13:00", End: "17:00"}},
			"tue": {{Start: "09:00", End: "12:00"}, {Start: "13:00", End: "17:00"}},
			"wed": {{Start: "09:00", End: "12:00"}, {Start: "13:00", End: "17:00"}},
			"thu": {{Start: "09:00", End: "17:00"}},
			"fri": {{Start: "09:00", End: "17:00"}},
		},
		DateOverrides: []data.DateOverride{
			{Date: "2026-12-24", Closed: true},
			{Date: "2026-12-31", Hours: []data.TimeRange{{Start: "10:00", End: "14:00"}}},
		},
		SlotStepMinutes:         15,
		AllowedDurationsMinutes: []int{30, 60},
		BufferAfterMinutes:      15,
		MinNoticeMinutes:        60,
		HorizonDays:             40,
	}
	h := newRuleHarness(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC) // Tue 09:00 in Berlin
	wantCode(t, h.do(now, calendarCmd("cal", "Europe/Berlin", rules)), "")
	wantCode(t, h.do(now, bookingCmd("cal", local(2026, 12, 2, 9, 0), time.Hour)), "") // Wed 09:00-10:00

	for _, tc := range []struct {
		name  string
		start time.Time
		d     time.Duration
		code  string
	}{
		{"open, on the grid", local(2026, 12, 2, 10, 30), 30 * time.Minute, ""},
		{"lunch break", local(2026, 12, 2, 12, 0), 30 * time.Minute, actor.CodeOutsideHours},
		{"reaches into lunch", local(2026, 12, 2, 11, 45), 30 * time.Minute, actor.CodeOutsideHours},
		{"before opening", local(2026, 12, 3, 8, 30), time.Hour, actor.CodeOutsideHours},
		{"thursday long day spans noon", local(2026, 12, 3, 11, 30), time.Hour, ""},
		{"saturday", local(2026, 12, 5, 10, 0), time.Hour, actor.CodeOutsideHours},
		{"closed override", local(2026, 12, 24, 10, 0), time.Hour, actor.CodeOutsideHours},
		{"special hours", local(2026, 12, 31, 10, 0), time.Hour, ""},
		{"after special hours", local(2026, 12, 31, 14, 0), 30 * time.Minute, actor.CodeOutsideHours},
		{"misaligned", local(2026, 12, 3, 10, 5), 30 * time.Minute, actor.CodeMisaligned},
		{"duration not in list", local(2026, 12, 3, 10, 0), 45 * time.Minute, actor.CodeDurationNotAllowed},
		{"too soon", local(2026, 12, 1, 9, 30), 30 * time.Minute, actor.CodeTooSoon},
		{"notice exactly met", local(2026, 12, 1, 10, 0), 30 * time.Minute, ""},
		{"too far", local(2027, 1, 11, 10, 0), 30 * time.Minute, actor.CodeTooFar},
		{"overlap", local(2026, 12, 2, 9, 30), 30 * time.Minute, actor.CodeSlotTaken},
		{"inside the buffer", local(2026, 12, 2, 10, 0), 30 * time.Minute, actor.CodeBufferConflict},
		{"right after the buffer", local(2026, 12, 2, 10, 15), 30 * time.Minute, ""},
		{"its buffer reaches the next booking", local(2026, 12, 2, 8, 30), 30 * time.Minute, actor.CodeOutsideHours},
	} {
		r := h.try(now, bookingCmd("cal", tc.start, tc.d))
		if (tc.code == "" && r.Outcome != actor.OutcomeAccepted) || (tc.code != "" && r.Code != tc.code) {
			t.Errorf("%s: got %s %s (%s), want %q", tc.name, r.Outcome, r.Code, r.Message, tc.code)
		}
	}
	// A booking whose own after-buffer would reach an existing booking.
	wantCode(t, h.do(now, bookingCmd("cal", local(2026, 12, 3, 14, 0), time.Hour)), "")
	if r := h.try(now, bookingCmd("cal", local(2026, 12, 3, 13, 0), time.Hour)); r.Code != actor.CodeBufferConflict {
		t.Errorf("after-buffer into the next booking: %+v", r)
	}
	// Rules changed later do not touch existing bookings, and apply to new ones.
	rules.SlotStepMinutes = 60
	wantCode(t, h.do(now, calendarCmd("cal", "Europe/Berlin", rules)), "")
	if r := h.try(now, bookingCmd("cal", local(2026, 12, 7, 10, 30), 30*time.Minute)); r.Code != actor.CodeMisaligned {
		t.Errorf("after tightening the step: %+v", r)
	}
	_ = h.s.View(func(tx *data.Tx) error {
		if bks, _, _ := tx.ListBookings("cal", now, now.Add(1000*time.Hour), 0, nil); len(bks) != 2 {
			t.Errorf("existing bookings after a rule change: %d, want 2", len(bks))
		}
		return nil
	})
}

func TestRulesValidation(t *testing.T) {
	h := newRuleHarness(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for name, r := range map[string]data.Rules{
		"weekday":   {WeeklyHours: map[string][]data.TimeRange{"monday": {{Start: "09:00", End: "10:00"}}}},
		"clock":     {WeeklyHours: map[string][]data.TimeRange{"mon": {{Start: "9:00", End: "10:00"}}}},
		"reversed":  {WeeklyHours: map[string][]data.TimeRange{"mon": {{Start: "10:00", End: "09:00"}}}},
		"past 24":   {WeeklyHours: map[string][]data.TimeRange{"mon": {{Start: "23:00", End: "24:30"}}}},
		"date":      {DateOverrides: []data.DateOverride{{Date: "2026-13-01", Closed: true}}},
		"twice":     {DateOverrides: []data.DateOverride{{Date: "2026-12-01", Closed: true}, {Date: "2026-12-01", Closed: true}}},
		"step":      {SlotStepMinutes: -1},
		"min > max": {MinDurationMinutes: 60, MaxDurationMinutes: 30},
		"capacity":  {Capacity: 100000},
		"buffer":    {BufferBeforeMinutes: 5000},
	} {
		if r := h.do(now, calendarCmd("c", "UTC", r)); r.Code != actor.CodeInvalidRequest || len(r.Details) == 0 {
			t.Errorf("%s: %+v", name, r)
		}
	}
}

// TestValidateRulesDetailsOrder: invalid weekly hours are reported in
// weekday order, mon..sun, then unknown keys sorted, whatever the map's
// iteration order.
func TestValidateRulesDetailsOrder(t *testing.T) {
	bad := []data.TimeRange{{Start: "10:00", End: "09:00"}}
	r := data.Rules{WeeklyHours: map[string][]data.TimeRange{
		"sun": bad, "zzz": nil, "mon": bad, "Tue": nil, "fri": bad, "abc": bad, "wed": bad,
	}}
	want := []string{"weekly_hours.mon[0]", "weekly_hours.wed[0]", "weekly_hours.fri[0]", "weekly_hours.sun[0]",
		"weekly_hours.Tue", "weekly_hours.abc", "weekly_hours.abc[0]", "weekly_hours.zzz"}
	for range 100 {
		var got []string
		for _, e := range actor.ValidateRules(&r) {
			got = append(got, e.Field)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("details %v, want %v", got, want)
		}
	}
}

// TestDSTAndOffsets: the grid and opening hours follow local wall time on
// transition days and in zones with half-hour offsets.
func TestDSTAndOffsets(t *testing.T) {
	h := newRuleHarness(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		zone        string
		day         time.Time // local midnight of the day, as a date
		wantHourly  int       // bookable hourly starts that day (open 24h, step 60)
		extraChecks func(t *testing.T, cal string)
	}{
		{zone: "Europe/Berlin", day: time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), wantHourly: 23},
		{zone: "Europe/Berlin", day: time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), wantHourly: 25},
		{zone: "America/New_York", day: time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC), wantHourly: 23},
		{zone: "America/New_York", day: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), wantHourly: 25},
		{zone: "Asia/Kolkata", day: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), wantHourly: 24},
		{zone: "Australia/Adelaide", day: time.Date(2026, 4, 5, 0, 0, 0, 0, time.UTC), wantHourly: 25},
	} {
		loc := mustLoc(t, tc.zone)
		cal := fmt.Sprintf("dst-%d", h.n)
		wantCode(t, h.do(now, calendarCmd(cal, tc.zone, data.Rules{SlotStepMinutes: 60})), "")
		y, m, d := tc.day.Date()
		from := time.Date(y, m, d, 0, 0, 0, 0, loc)
		to := time.Date(y, m, d+1, 0, 0, 0, 0, loc)
		var slots []actor.BookableStart
		_ = h.s.View(func(tx *data.Tx) error {
			c, _ := tx.Calendar(cal)
			var err error
			slots, err = actor.Availability(tx, &c, from, to, time.Hour, 0, now)
			return err
		})
		if len(slots) != tc.wantHourly {
			t.Errorf("%s %s: %d hourly starts, want %d: %v", tc.zone, tc.day.Format(time.DateOnly), len(slots), tc.wantHourly, slots)
		}
		for _, s := range slots {
			if lt := s.Start.In(loc); lt.Minute() != 0 || s.Local != lt.Format(time.RFC3339) {
				t.Errorf("%s: slot %v local %s not on the local hour", tc.zone, s.Start, s.Local)
			}
		}
	}
	// Half-hour offset: 10:00 in Kolkata is 04:30 UTC and is on a 60-minute
	// grid; 05:00 UTC (10:30 local) is not.
	wantCode(t, h.do(now, calendarCmd("kol", "Asia/Kolkata", data.Rules{SlotStepMinutes: 60})), "")
	wantCode(t, h.do(now, bookingCmd("kol", time.Date(2026, 6, 1, 4, 30, 0, 0, time.UTC), time.Hour)), "")
	if r := h.try(now, bookingCmd("kol", time.Date(2026, 6, 1, 5, 0, 0, 0, time.UTC), time.Hour)); r.Code != actor.CodeMisaligned {
		t.Errorf("Kolkata 10:30 local on a 60-min grid: %+v", r)
	}
	// Opening hours on the Berlin fall-back day: 01:00-04:00 local is four
	// real hours.
	rules := data.Rules{WeeklyHours: map[string][]data.TimeRange{"sun": {{Start: "01:00", End: "04:00"}}}}
	wantCode(t, h.do(now, calendarCmd("fb", "Europe/Berlin", rules)), "")
	berlin := mustLoc(t, "Europe/Berlin")
	start := time.Date(2026, 10, 25, 1, 0, 0, 0, berlin)
	wantCode(t, h.do(now, bookingCmd("fb", start, 4*time.Hour)), "")
	if r := h.try(now, bookingCmd("fb", start, 5*time.Hour)); r.Code != actor.CodeOutsideHours {
		t.Errorf("fall-back day five hours: %+v", r)
	}
	// Spring-forward day: 01:00-04:00 local is two real hours.
	spring := time.Date(2026, 3, 29, 1, 0, 0, 0, berlin)
	if r := h.try(now, bookingCmd("fb", spring, 3*time.Hour)); r.Code != actor.CodeOutsideHours {
		t.Errorf("spring-forward day three hours: %+v", r)
	}
	wantCode(t, h.do(now, bookingCmd("fb", spring, 2*time.Hour)), "")
}

// TestAvailabilityAgreesWithDecision: for random rule sets and bookings,
// every grid start that availability lists is accepted by the writer and
// every grid start it omits is refused, at the same "now".
func TestAvailabilityAgreesWithDecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	zones := []string{"Europe/Berlin", "America/New_York", "Asia/Kolkata", "UTC"}
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	totalListed, totalRefused := 0, 0
	for round := 0; round < rounds; round++ {
		h := newRuleHarness(t)
		zone := zones[rng.IntN(len(zones))]
		loc := mustLoc(t, zone)
		step := []int{15, 30, 60}[rng.IntN(3)]
		r := data.Rules{SlotStepMinutes: step, Capacity: 1 + rng.IntN(3),
			BufferBeforeMinutes: []int{0, 0, 10}[rng.IntN(3)], BufferAfterMinutes: []int{0, 15}[rng.IntN(2)],
			MinNoticeMinutes: []int{0, 120}[rng.IntN(2)], HorizonDays: []int{0, 2}[rng.IntN(2)]}
		if rng.IntN(2) == 0 {
			r.WeeklyHours = map[string][]data.TimeRange{}
			for _, d := range []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"} {
				if rng.IntN(5) > 0 {
					r.WeeklyHours[d] = []data.TimeRange{{Start: "08:00", End: "12:00"}, {Start: "12:30", End: "18:00"}}
				}
			}
			r.DateOverrides = []data.DateOverride{{Date: "2026-10-26", Hours: []data.TimeRange{{Start: "10:00", End: "11:00"}}}}
		}
		if rng.IntN(2) == 0 {
			r.MinDurationMinutes, r.MaxDurationMinutes = 30, 90
		}
		// Around the Berlin/Europe DST change.
		now := time.Date(2026, 10, 24, 6, 0, 0, 0, time.UTC)
		wantCode(t, h.do(now, calendarCmd("p", zone, r)), "")
		for i := 0; i < 30; i++ {
			s := now.Add(time.Duration(rng.IntN(3*24*4)) * 15 * time.Minute)
			h.do(now, bookingCmd("p", s, time.Duration(1+rng.IntN(6))*15*time.Minute))
		}
		d := time.Duration(1+rng.IntN(4)) * 30 * time.Minute
		from, to := now, now.Add(3*24*time.Hour)
		var listed map[time.Time]bool
		_ = h.s.View(func(tx *data.Tx) error {
			c, _ := tx.Calendar("p")
			slots, err := actor.Availability(tx, &c, from, to, d, 0, now)
			listed = map[time.Time]bool{}
			for _, s := range slots {
				listed[s.Start] = true
			}
			return err
		})
		checked := 0
		for t0 := from; t0.Before(to); t0 = t0.Add(time.Minute) {
			lt := t0.In(loc)
			if (lt.Hour()*60+lt.Minute())%step != 0 {
				continue
			}
			checked++
			got := h.try(now, bookingCmd("p", t0, d))
			accepted := got.Outcome == actor.OutcomeAccepted
			if accepted {
				totalListed++
			} else {
				totalRefused++
			}
			if accepted != listed[t0] {
				t.Fatalf("round %d (%s %+v): start %s (%s local) listed=%v but the writer says %s %s",
					round, zone, r, t0.Format(time.RFC3339), lt.Format(time.RFC3339), listed[t0], got.Outcome, got.Code)
			}
		}
		if checked == 0 {
			t.Fatal("no grid points checked")
		}
	}
	if totalListed == 0 || totalRefused == 0 {
		t.Fatalf("degenerate property run: %d bookable, %d refused grid starts", totalListed, totalRefused)
	}
	t.Logf("%d bookable and %d refused grid starts agreed", totalListed, totalRefused)
}

func TestCapacitySeats(t *testing.T) {
	h := newRuleHarness(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	wantCode(t, h.do(now, calendarCmd("class", "UTC", data.Rules{Capacity: 3})), "")
	slot := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	won := 0
	for i := 0; i < 10; i++ {
		if r := h.do(now, bookingCmd("class", slot.Add(time.Duration(i%2)*30*time.Minute), time.Hour)); r.Outcome == actor.OutcomeAccepted {
			won++
		} else if r.Code != actor.CodeSlotTaken {
			t.Fatalf("seat %d: %+v", i, r)
		}
	}
	if won != 3 {
		t.Fatalf("%d seats taken, capacity 3", won)
	}
	// A booking after the overlap region still fits.
	wantCode(t, h.do(now, bookingCmd("class", slot.Add(time.Hour), 30*time.Minute)), "")
}

// TestEarlyHoldExpireKeepsItsRequestID: the hold expirer names the expiry
// it publishes for (request id expire.<ns>), at its own clock. Stored
// before that instant in log time (its clock ahead of the stream leader's),
// the command expires what is due at its log time but must not use up its
// request id: the same command stored on time then expires the hold,
// instead of being answered from a record of "nothing due yet".
func TestEarlyHoldExpireKeepsItsRequestID(t *testing.T) {
	h := newRuleHarness(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	wantCode(t, h.do(now, calendarCmd("h", "UTC", data.Rules{})), "")
	slot := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	hold := func(at time.Time, req string, start time.Time, ttl int) data.Booking {
		r := h.do(at, actor.Command{Type: actor.TypeHoldCreate, RequestID: req, CalendarID: "h",
			Booking: &actor.BookingSpec{Start: start, End: start.Add(time.Hour), Customer: "c", TTLSeconds: ttl}})
		wantCode(t, r, "")
		return *r.Booking
	}
	short, long := hold(now, "short", slot, 60), hold(now, "long", slot.Add(2*time.Hour), 300)
	expire := actor.Command{Type: actor.TypeHoldExpire, CalendarID: "h", RequestID: actor.ExpireRequestID(*long.ExpiresAt)}
	status := func(id string) string {
		t.Helper()
		var st string
		_ = h.s.View(func(tx *data.Tx) error {
			bk, err := tx.Booking("h", id)
			if err != nil {
				t.Fatal(err)
			}
			st = bk.Status
			return nil
		})
		return st
	}
	recorded := func() bool {
		t.Helper()
		var ok bool
		_ = h.s.View(func(tx *data.Tx) (err error) { _, ok, err = tx.Request("h", expire.RequestID); return err })
		return ok
	}

	// Stored a second before the expiry it names: what is due then
	// expires, the rest stays, and the id is not used up.
	early := h.do(long.ExpiresAt.Add(-time.Second), expire)
	wantCode(t, early, "")
	if status(short.ID) != data.StatusExpired || status(long.ID) != data.StatusHeld {
		t.Fatalf("early expire: short %s, long %s", status(short.ID), status(long.ID))
	}
	if recorded() {
		t.Fatal("an early expire command used up its request id")
	}
	// The same command, stored on time.
	onTime := h.do(*long.ExpiresAt, expire)
	wantCode(t, onTime, "")
	if st := status(long.ID); st != data.StatusExpired {
		t.Fatalf("expire on time after an early one: hold %s", st)
	}
	if !recorded() {
		t.Fatal("the expire command on time was not recorded")
	}
	// From then on its id answers from the record.
	if again := h.do(long.ExpiresAt.Add(time.Hour), expire); again.Seq != onTime.Seq || early.Seq == onTime.Seq {
		t.Fatalf("repeat: %+v, want the record of seq %d", again, onTime.Seq)
	}

	// The id form of earlier builds (expire.<ns>) is decided as those
	// builds did, recorded even when early, so that their logs replay to
	// the same index.
	third := hold(long.ExpiresAt.Add(time.Hour), "third", slot.Add(4*time.Hour), 600)
	legacy := actor.Command{Type: actor.TypeHoldExpire, CalendarID: "h", RequestID: "expire." + strconv.FormatInt(third.ExpiresAt.UnixNano(), 10)}
	wantCode(t, h.do(third.ExpiresAt.Add(-time.Second), legacy), "")
	var ok bool
	_ = h.s.View(func(tx *data.Tx) (err error) { _, ok, err = tx.Request("h", legacy.RequestID); return err })
	if !ok || status(third.ID) != data.StatusHeld {
		t.Fatalf("legacy early expire: recorded %v, hold %s", ok, status(third.ID))
	}
}

func TestHoldsExpireByLogTime(t *testing.T) {
	h := newRuleHarness(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	wantCode(t, h.do(now, calendarCmd("h", "UTC", data.Rules{MaxHoldTTLSeconds: 600})), "")
	slot := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	holdCmd := func(ttl int) actor.Command {
		c := bookingCmd("h", slot, time.Hour)
		c.Type, c.Booking.TTLSeconds = actor.TypeHoldCreate, ttl
		return c
	}
	if r := h.do(now, holdCmd(601)); r.Code != actor.CodeInvalidRequest {
		t.Fatalf("ttl over the calendar's max: %+v", r)
	}
	hold := h.do(now, holdCmd(300))
	wantCode(t, hold, "")
	if hold.Booking.Status != data.StatusHeld || !hold.Booking.ExpiresAt.Equal(now.Add(5*time.Minute)) {
		t.Fatalf("hold: %+v", hold.Booking)
	}
	// While held, the interval is taken.
	if r := h.try(now.Add(299*time.Second), bookingCmd("h", slot, time.Hour)); r.Code != actor.CodeSlotTaken {
		t.Fatalf("during the hold: %+v", r)
	}
	// At expiry, with no expiry command yet, the interval is free again and
	// the hold cannot be confirmed.
	later := now.Add(300 * time.Second)
	if r := h.try(later, bookingCmd("h", slot, time.Hour)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("after expiry: %+v", r)
	}
	confirm := actor.Command{Type: actor.TypeHoldConfirm, CalendarID: "h", BookingID: hold.Booking.ID}
	if r := h.try(later, confirm); r.Code != actor.CodeHoldExpired {
		t.Fatalf("confirm after expiry: %+v", r)
	}
	// The expiry command records it and empties the due list.
	var due []data.DueHold
	_ = h.s.View(func(tx *data.Tx) error { due = tx.DueHolds(later, 10); return nil })
	if len(due) != 1 {
		t.Fatalf("due holds: %v", due)
	}
	wantCode(t, h.do(later, actor.Command{Type: actor.TypeHoldExpire, CalendarID: "h"}), "")
	_ = h.s.View(func(tx *data.Tx) error {
		due = tx.DueHolds(later, 10)
		bk, _ := tx.Booking("h", hold.Booking.ID)
		if bk.Status != data.StatusExpired || len(due) != 0 {
			t.Errorf("after hold.expire: status %s, due %v", bk.Status, due)
		}
		return nil
	})

	// A hold confirmed in time becomes the booking, same id; releasing it
	// then is refused; a released hold frees the interval.
	h2 := h.do(later, holdCmd(60))
	wantCode(t, h2, "")
	c := h.do(later.Add(59*time.Second), actor.Command{Type: actor.TypeHoldConfirm, CalendarID: "h", BookingID: h2.Booking.ID})
	wantCode(t, c, "")
	if c.Booking.ID != h2.Booking.ID || c.Booking.Status != data.StatusConfirmed {
		t.Fatalf("confirmed hold: %+v", c.Booking)
	}
	if r := h.do(later.Add(2*time.Minute), actor.Command{Type: actor.TypeHoldRelease, CalendarID: "h", BookingID: h2.Booking.ID}); r.Code != actor.CodeHoldConfirmed {
		t.Fatalf("release of a confirmed hold: %+v", r)
	}
	// The confirmed booking does not expire.
	if r := h.try(later.Add(time.Hour), bookingCmd("h", slot, time.Hour)); r.Code != actor.CodeSlotTaken {
		t.Fatalf("confirmed hold after its ttl: %+v", r)
	}
	other := slot.Add(3 * time.Hour)
	h3 := h.do(later, actor.Command{Type: actor.TypeHoldCreate, CalendarID: "h", Booking: &actor.BookingSpec{Start: other, End: other.Add(time.Hour), Customer: "x", TTLSeconds: 300}})
	wantCode(t, h3, "")
	wantCode(t, h.do(later, actor.Command{Type: actor.TypeHoldRelease, CalendarID: "h", BookingID: h3.Booking.ID}), "")
	wantCode(t, h.do(later, bookingCmd("h", other, time.Hour)), "")
	if r := h.do(later, actor.Command{Type: actor.TypeHoldConfirm, CalendarID: "h", BookingID: h3.Booking.ID}); r.Code != actor.CodeHoldNotFound {
		t.Fatalf("confirm of a released hold: %+v", r)
	}
	if r := h.do(later, actor.Command{Type: actor.TypeHoldConfirm, CalendarID: "h", BookingID: actor.BookingID("h", "nope")}); r.Code != actor.CodeHoldNotFound {
		t.Fatalf("confirm of an unknown hold: %+v", r)
	}
}

func TestReschedule(t *testing.T) {
	h := newRuleHarness(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	wantCode(t, h.do(now, calendarCmd("r", "UTC", data.Rules{SlotStepMinutes: 30})), "")
	a := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	first := h.do(now, bookingCmd("r", a, time.Hour))
	wantCode(t, first, "")
	wantCode(t, h.do(now, bookingCmd("r", a.Add(2*time.Hour), time.Hour)), "")
	move := func(start time.Time, d time.Duration) actor.Command {
		return actor.Command{Type: actor.TypeBookingReschedule, CalendarID: "r", BookingID: first.Booking.ID, Reschedule: &actor.IntervalSpec{Start: start, End: start.Add(d)}}
	}
	// Into the other booking: refused, the old interval is untouched.
	if r := h.do(now, move(a.Add(90*time.Minute), time.Hour)); r.Code != actor.CodeSlotTaken {
		t.Fatalf("move onto another booking: %+v", r)
	}
	if r := h.do(now, move(a.Add(10*time.Minute), time.Hour)); r.Code != actor.CodeMisaligned {
		t.Fatalf("misaligned move: %+v", r)
	}
	if r := h.try(now, bookingCmd("r", a, time.Hour)); r.Code != actor.CodeSlotTaken {
		t.Fatalf("old interval released by a refused move: %+v", r)
	}
	// Overlapping its own old interval is fine.
	moved := h.do(now, move(a.Add(30*time.Minute), time.Hour))
	wantCode(t, moved, "")
	if moved.Booking.ID != first.Booking.ID || !moved.Booking.Start.Equal(a.Add(30*time.Minute)) {
		t.Fatalf("moved: %+v", moved.Booking)
	}
	wantCode(t, h.do(now, bookingCmd("r", a.Add(-30*time.Minute), 60*time.Minute)), "") // 09:30-10:30 is free now
	wantCode(t, h.do(now, actor.Command{Type: actor.TypeBookingCancel, CalendarID: "r", BookingID: first.Booking.ID}), "")
	if r := h.do(now, move(a.Add(5*time.Hour), time.Hour)); r.Code != actor.CodeBookingNotConfirmed {
		t.Fatalf("move of a cancelled booking: %+v", r)
	}
}

// BenchmarkAvailability31Days: availability of 30-minute starts over 31 days
// on a calendar with 10k bookings and opening hours.
func BenchmarkAvailability31Days(b *testing.B) {
	s := datatest.MustOpen(b)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &ruleHarness{tb: b, s: s}
	rules := data.Rules{SlotStepMinutes: 15, BufferAfterMinutes: 5, WeeklyHours: map[string][]data.TimeRange{}}
	for _, d := range []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"} {
		rules.WeeklyHours[d] = []data.TimeRange{{Start: "07:00", End: "22:00"}}
	}
	h.do(now, calendarCmd("bench", "Europe/Berlin", rules))
	var ins []actor.Input
	for i := 0; i < 10000; i++ {
		start := now.Add(time.Duration(i) * 6 * time.Hour / 5) // ~20 per day over ~500 days
		ins = append(ins, h.input(now, bookingCmd("bench", start.Truncate(15*time.Minute), 30*time.Minute)))
		if len(ins) == 500 {
			applyInputs(b, s, 0, ins...)
			ins = ins[:0]
		}
	}
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		_ = s.View(func(tx *data.Tx) error {
			c, _ := tx.Calendar("bench")
			_, err := actor.Availability(tx, &c, from, from.AddDate(0, 0, 31), 30*time.Minute, 0, now)
			return err
		})
	}
}
