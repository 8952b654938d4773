package actor

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/data"
)

// availabilityReference is the availability query as it was before the
// sweep, kept as the reference the sweep is held to: it walks every whole
// UTC minute of [from, to), keeps those on the grid and runs the writer's
// decideInterval for each.
func availabilityReference(tx *data.Tx, cal *data.Calendar, from, to time.Time, d, step time.Duration, now time.Time) ([]BookableStart, error) {
	if logNow := tx.LatestLogNow(); logNow.After(now) {
		now = logNow
	}
	loc, err := zones.Load(cal.Timezone)
	if err != nil {
		return nil, err
	}
	stepMin := cal.SlotStepMinutes
	if stepMin <= 0 {
		stepMin = int(step / time.Minute)
	}
	if stepMin <= 0 {
		stepMin = 15
	}
	grid := cal.Rules
	grid.SlotStepMinutes = stepMin
	out := []BookableStart{}
	t := from.UTC().Truncate(time.Minute)
	if t.Before(from) {
		t = t.Add(time.Minute)
	}
	for ; t.Before(to); t = t.Add(time.Minute) {
		if !aligned(&grid, loc, t) {
			continue
		}
		iv := data.Interval{Start: t, End: t.Add(d)}
		if v := decideInterval(tx, cal, loc, iv, now, ""); v.code == "" {
			out = append(out, BookableStart{Start: t, Local: t.In(loc).Format(time.RFC3339)})
		}
	}
	return out, nil
}

// withinHoursReference is withinHours as it was before openStretches was
// taken out of it.
func withinHoursReference(r *data.Rules, loc *time.Location, iv data.Interval) bool {
	if !hasHours(r) {
		return true
	}
	var open []data.Interval
	first := iv.Start.In(loc).AddDate(0, 0, -1)
	last := iv.End.In(loc).AddDate(0, 0, 1)
	for day := time.Date(first.Year(), first.Month(), first.Day(), 12, 0, 0, 0, loc); !day.After(last); day = day.AddDate(0, 0, 1) {
		y, m, d := day.Date()
		for _, rg := range openOn(r, y, m, d) {
			open = append(open, data.Interval{Start: localTime(loc, y, m, d, rg[0]), End: localTime(loc, y, m, d, rg[1])})
		}
	}
	slices.SortFunc(open, func(a, b data.Interval) int { return a.Start.Compare(b.Start) })
	var cur data.Interval
	for i, o := range open {
		if !o.Start.Before(o.End) {
			continue
		}
		if i == 0 || cur.End.Before(o.Start) {
			cur = o
		} else if o.End.After(cur.End) {
			cur.End = o.End
		}
		if !cur.Start.After(iv.Start) && !cur.End.Before(iv.End) {
			return true
		}
	}
	return false
}

// availabilityScene is a place in time where grids and opening hours are
// tricky: DST changes (at 02:00, at midnight, by half an hour), a skipped
// date, offsets of 30 and 45 minutes and one that is not whole minutes.
type availabilityScene struct {
	zone string
	at   time.Time // UTC, near the interesting instant
}

var availabilityScenes = []availabilityScene{
	{"UTC", time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)},
	{"Europe/Berlin", time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)},
	{"Europe/Berlin", time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC)},
	{"America/New_York", time.Date(2026, 11, 0, 12, 0, 0, 0, time.UTC)},
	{"America/New_York", time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)},
	{"Australia/Lord_Howe", time.Date(2026, 4, 4, 0, 0, 0, 0, time.UTC)},
	{"Asia/Beirut", time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC)},
	{"Asia/Beirut", time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC)},
	{"America/Santiago", time.Date(2026, 4, 4, 0, 0, 0, 0, time.UTC)},
	{"America/Santiago", time.Date(2026, 9, 5, 0, 0, 0, 0, time.UTC)},
	{"America/Sao_Paulo", time.Date(2018, 11, 3, 0, 0, 0, 0, time.UTC)},
	{"America/Havana", time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)},
	{"Pacific/Apia", time.Date(2011, 12, 28, 12, 0, 0, 0, time.UTC)},
	{"Asia/Kolkata", time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)},
	{"Asia/Kathmandu", time.Date(1985, 12, 30, 12, 0, 0, 0, time.UTC)},
	{"America/St_Johns", time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)},
	{"Africa/Monrovia", time.Date(1972, 1, 5, 0, 0, 0, 0, time.UTC)},
}

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// randomClock is "HH:MM" on a 15-minute grid, or 24:00.
func randomClock(rng *rand.Rand, lo, hi int) (int, string) {
	m := lo + rng.IntN((hi-lo)/15+1)*15
	return m, fmt.Sprintf("%02d:%02d", m/60, m%60)
}

func randomRanges(rng *rand.Rand) []data.TimeRange {
	var out []data.TimeRange
	at := 0
	for n := rng.IntN(4); n > 0 && at < 24*60; n-- {
		a, as := randomClock(rng, at, min(at+8*60, 24*60-15))
		b, bs := randomClock(rng, a+15, min(a+10*60, 24*60))
		out = append(out, data.TimeRange{Start: as, End: bs})
		at = b + pick(rng, 0, 0, 15, 60) // touching ranges join
	}
	if rng.IntN(4) == 0 { // open through midnight into the next day
		out = append(out, data.TimeRange{Start: "22:00", End: "24:00"})
	}
	return out
}

func randomRules(rng *rand.Rand, day time.Time) data.Rules {
	r := data.Rules{
		SlotStepMinutes:     pick(rng, 0, 0, 5, 7, 15, 30, 45, 60, 90),
		BufferBeforeMinutes: pick(rng, 0, 0, 10, 30),
		BufferAfterMinutes:  pick(rng, 0, 0, 15, 60),
		MinNoticeMinutes:    pick(rng, 0, 0, 30, 600),
		HorizonDays:         pick(rng, 0, 0, 1, 2),
		Capacity:            pick(rng, 0, 1, 2, 3),
	}
	switch rng.IntN(4) {
	case 0:
		r.MinDurationMinutes, r.MaxDurationMinutes = 30, 120
	case 1:
		r.AllowedDurationsMinutes = []int{15, 60, 90}
	}
	if rng.IntN(3) > 0 {
		r.WeeklyHours = map[string][]data.TimeRange{}
		for _, d := range weekOrder {
			if rng.IntN(5) > 0 {
				r.WeeklyHours[d] = randomRanges(rng)
			}
		}
	}
	for i := rng.IntN(3); i > 0; i-- {
		date := day.AddDate(0, 0, rng.IntN(4)-1).Format(time.DateOnly)
		if slices.ContainsFunc(r.DateOverrides, func(o data.DateOverride) bool { return o.Date == date }) {
			continue
		}
		o := data.DateOverride{Date: date, Closed: rng.IntN(3) == 0}
		if !o.Closed {
			o.Hours = randomRanges(rng)
		}
		r.DateOverrides = append(r.DateOverrides, o)
	}
	return r
}

// fillCalendar writes calendar id straight into the index, as no writer
// would: bookings and holds (live and expired) beyond its capacity and with
// buffers other than its own, and busy blocks (some cleared, some empty),
// so that the sweep meets every state an index can be in.
func fillCalendar(t *testing.T, tx *data.Tx, rng *rand.Rand, id, zone string, r data.Rules, base, now time.Time) {
	if err := tx.PutCalendar(data.Calendar{ID: id, Timezone: zone, Rules: r}); err != nil {
		t.Fatal(err)
	}
	minute := func(span int) time.Time { return base.Add(time.Duration(rng.IntN(span)-span/4) * time.Minute) }
	for i := rng.IntN(40); i > 0; i-- {
		start := minute(4 * 24 * 60).Truncate(time.Duration(pick(rng, 1, 5, 15)) * time.Minute)
		bk := data.Booking{ID: data.BookingID(id, fmt.Sprintf("r%d", i)), CalendarID: id, Start: start,
			End: start.Add(time.Duration(pick(rng, 5, 15, 30, 60, 90, 240, 600)) * time.Minute), Customer: "c",
			Status: data.StatusConfirmed, CreatedAt: now,
			BufferBefore: time.Duration(pick(rng, 0, 0, 10, 30)) * time.Minute, BufferAfter: time.Duration(pick(rng, 0, 0, 15)) * time.Minute}
		if rng.IntN(4) == 0 {
			exp := now.Add(time.Duration(rng.IntN(20)-10) * time.Minute)
			bk.Status, bk.ExpiresAt = data.StatusHeld, &exp
		}
		if err := tx.PutBooking(bk); err != nil {
			t.Fatal(err)
		}
	}
	for i := rng.IntN(6); i > 0; i-- {
		start := minute(4 * 24 * 60)
		b := data.BusyBlock{ID: fmt.Sprintf("busy%d", i), Start: start, End: start.Add(time.Duration(rng.IntN(300)) * time.Minute),
			Seq: uint64(i), Cleared: rng.IntN(4) == 0}
		if err := tx.PutBusy(id, b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAvailabilitySweepMatchesReference is the differential test of the
// sweep: on random calendars (opening hours and overrides, grids, duration
// rules, buffers, seats, holds, busy blocks, notice and horizon, in zones
// with awkward DST changes) and random queries, Availability answers
// exactly what the per-start reference answers, byte for byte.
func TestAvailabilitySweepMatchesReference(t *testing.T) {
	s, err := data.Open(filepath.Join(t.TempDir(), "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rng := rand.New(rand.NewPCG(26, 3))
	rounds := 400
	if testing.Short() {
		rounds = 100
	}
	listed, empty := 0, 0
	for round := range rounds {
		sc := availabilityScenes[round%len(availabilityScenes)]
		loc, err := zones.Load(sc.zone)
		if err != nil {
			t.Fatal(err)
		}
		base := sc.at.Add(time.Duration(rng.IntN(24*60)-12*60) * time.Minute)
		now := base.Add(time.Duration(rng.IntN(48*60)-24*60) * time.Minute)
		r := randomRules(rng, base.In(loc))
		id := fmt.Sprintf("c%d", round)
		if err := s.Commit(func(tx *data.Tx) error { fillCalendar(t, tx, rng, id, sc.zone, r, base, now); return nil }); err != nil {
			t.Fatal(err)
		}
		for q := 0; q < 4; q++ {
			from := base.Add(time.Duration(rng.IntN(36*60)-18*60) * time.Minute)
			if rng.IntN(4) == 0 {
				from = from.Add(time.Duration(rng.IntN(60)) * time.Second)
			}
			to := from.Add(time.Duration(1+rng.IntN(3*24*60)) * time.Minute)
			d := time.Duration(pick(rng, 1, 5, 15, 30, 45, 60, 90, 180, 23*60, 25*60)) * time.Minute
			step := time.Duration(pick(rng, 0, 1, 5, 7, 15, 45, 60, 90)) * time.Minute
			var got, want []BookableStart
			err := s.View(func(tx *data.Tx) error {
				c, err := tx.Calendar(id)
				if err != nil {
					return err
				}
				if want, err = availabilityReference(tx, &c, from, to, d, step, now); err != nil {
					return err
				}
				got, err = Availability(tx, &c, from, to, d, step, now)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			if string(gb) != string(wb) {
				rb, _ := json.Marshal(r)
				t.Fatalf("round %d query %d: %s, now %s, rules %s\nfrom %s to %s duration %s step %s\nsweep     %s\nreference %s",
					round, q, sc.zone, now.Format(time.RFC3339), rb, from.Format(time.RFC3339), to.Format(time.RFC3339), d, step, gb, wb)
			}
			if len(want) > 0 {
				listed++
			} else {
				empty++
			}
		}
	}
	if listed < rounds || empty == 0 {
		t.Fatalf("degenerate run: %d queries listed starts, %d listed none", listed, empty)
	}
	t.Logf("%d queries listed starts, %d none; all agreed", listed, empty)
}

// TestWithinHoursMatchesReference: withinHours, now read through
// openStretches, decides as it did before, on random rules and intervals.
func TestWithinHoursMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	in, out := 0, 0
	for i := range 20000 {
		sc := availabilityScenes[i%len(availabilityScenes)]
		loc, err := zones.Load(sc.zone)
		if err != nil {
			t.Fatal(err)
		}
		start := sc.at.Add(time.Duration(rng.IntN(3*24*60)-24*60) * time.Minute)
		r := randomRules(rng, start.In(loc))
		iv := data.Interval{Start: start, End: start.Add(time.Duration(1+rng.IntN(30*60)) * time.Minute)}
		got, want := withinHours(&r, loc, iv), withinHoursReference(&r, loc, iv)
		if got != want {
			rb, _ := json.Marshal(r)
			t.Fatalf("%s %s..%s rules %s: withinHours %v, reference %v", sc.zone, iv.Start, iv.End, rb, got, want)
		}
		if want {
			in++
		} else {
			out++
		}
	}
	if in == 0 || out == 0 {
		t.Fatalf("degenerate run: %d inside, %d outside", in, out)
	}
}

// TestAvailabilityCandidateBound: a query whose range holds more candidate
// starts than MaxAvailabilityCandidates is refused before any work, also
// when the grid is the calendar's own step rather than the query's.
func TestAvailabilityCandidateBound(t *testing.T) {
	s, err := data.Open(filepath.Join(t.TempDir(), "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	err = s.Commit(func(tx *data.Tx) error {
		if err := tx.PutCalendar(data.Calendar{ID: "open", Timezone: "UTC"}); err != nil {
			return err
		}
		return tx.PutCalendar(data.Calendar{ID: "fine", Timezone: "UTC", Rules: data.Rules{SlotStepMinutes: 1}})
	})
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		cal   string
		to    time.Time
		step  time.Duration
		slots int // -1: refused
	}{
		{"open", from.Add(MaxAvailabilityRange), 15 * time.Minute, 5952},
		{"open", from.Add(MaxAvailabilityRange), 14 * time.Minute, -1},
		{"open", from.Add(MaxAvailabilityCandidates * time.Minute), time.Minute, MaxAvailabilityCandidates},
		{"open", from.Add((MaxAvailabilityCandidates + 1) * time.Minute), time.Minute, -1},
		{"fine", from.Add(MaxAvailabilityRange), 24 * time.Hour, -1}, // the calendar's 1-minute grid counts
	} {
		err := s.View(func(tx *data.Tx) error {
			cal, err := tx.Calendar(c.cal)
			if err != nil {
				return err
			}
			out, err := Availability(tx, &cal, from, c.to, 30*time.Minute, c.step, from)
			switch {
			case c.slots < 0 && !errors.Is(err, ErrTooManyCandidates):
				t.Errorf("%s to %s step %s: %d slots, err %v; want ErrTooManyCandidates", c.cal, c.to, c.step, len(out), err)
			case c.slots >= 0 && (err != nil || len(out) != c.slots):
				t.Errorf("%s to %s step %s: %d slots, err %v; want %d", c.cal, c.to, c.step, len(out), err, c.slots)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
