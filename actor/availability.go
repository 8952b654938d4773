package actor

import (
	"errors"
	"math"
	"slices"
	"time"

	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/data"
)

// Limits of an availability query. Its work is one scan of the calendar's
// slot entries and busy blocks in the range plus a constant amount per
// candidate start, so bounding the range and the candidates bounds the work
// of one query.
const (
	// MaxAvailabilityRange bounds to - from of an availability query.
	MaxAvailabilityRange = 62 * 24 * time.Hour
	// MaxAvailabilityCandidates bounds the candidate starts of one query,
	// counted as (to - from) / step rounded up: 62 days at the default
	// 15-minute step (5,952) fit, a 1-minute step allows about 4 days.
	MaxAvailabilityCandidates = 6000
	// DefaultAvailabilityStep is the grid of a calendar without a slot step
	// when the query names none.
	DefaultAvailabilityStep = 15 * time.Minute
)

// ErrTooManyCandidates is Availability's answer to a range that holds more
// than MaxAvailabilityCandidates candidate starts.
var ErrTooManyCandidates = errors.New("actor: availability range holds too many candidate starts")

// BookableStart is one bookable start of an availability answer.
type BookableStart struct {
	Start time.Time `json:"start"`
	Local string    `json:"local"`
}

// AvailabilityStep is the grid an availability query on cal walks: the
// calendar's slot step, else step in whole minutes, else 15 minutes.
func AvailabilityStep(cal *data.Calendar, step time.Duration) time.Duration {
	if cal.SlotStepMinutes > 0 {
		return time.Duration(cal.SlotStepMinutes) * time.Minute
	}
	if m := step / time.Minute; m > 0 {
		return m * time.Minute
	}
	return DefaultAvailabilityStep
}

// AvailabilityCandidates is the number of candidate starts a query of
// [from, to) on a grid of step counts against MaxAvailabilityCandidates:
// (to - from) / step rounded up. The grid itself can hold a few more (the
// repeated hour of a DST fall-back; a step that does not divide a day
// restarts at each local midnight), never more than one per local day and
// one hour's worth per offset change beyond this.
func AvailabilityCandidates(from, to time.Time, step time.Duration) int {
	if !to.After(from) || step <= 0 {
		return 0
	}
	n := (to.Sub(from) + step - 1) / step
	return int(min(n, math.MaxInt32))
}

// Availability lists the starts in [from, to) on the calendar's slot grid
// (its slot step, or step when it has none) at which a booking of duration
// d would be accepted at now, or at the index's latest log time if that is
// later (a wall clock behind the stream's would show holds alive that the
// writer has seen expire). Every listed start is bookable and every omitted
// grid start is refused, given the same index and the same now: it decides
// what decideInterval decides for each start (a differential test holds it
// to the per-start check), but in one sweep, so its cost grows with the
// candidates and the slot entries in the range, not with their product.
func Availability(tx *data.Tx, cal *data.Calendar, from, to time.Time, d, step time.Duration, now time.Time) ([]BookableStart, error) {
	if d <= 0 {
		return nil, errors.New("actor: availability of a duration that is not positive")
	}
	if logNow := tx.LatestLogNow(); logNow.After(now) {
		now = logNow
	}
	loc, err := zones.Load(cal.Timezone)
	if err != nil {
		return nil, err
	}
	grid := AvailabilityStep(cal, step)
	if AvailabilityCandidates(from, to, grid) > MaxAvailabilityCandidates {
		return nil, ErrTooManyCandidates
	}
	return sweepAvailability(tx, cal, loc, from, to, d, int64(grid/time.Minute), now), nil
}

// sweepAvailability walks the grid starts in order and, beside them, the
// open stretches and the spans in which the busy blocks, the slot entries
// and their buffers leave no seat, all sorted by start and read once. A
// start is bookable when decideInterval would accept [start, start+d):
// the duration rules (the same for every start), notice and horizon
// (monotone in the start), one open stretch holding the interval, no busy
// block overlapping it, and fewer live entries than seats at every instant
// of the interval and of its buffered span. "Fewer than seats at every
// instant" is what maxCoverage checks start by start; here the instants
// where the seats run out are found once (fullSpans) and each window only
// asks whether it touches one.
func sweepAvailability(tx *data.Tx, cal *data.Calendar, loc *time.Location, from, to time.Time, d time.Duration, stepMin int64, now time.Time) []BookableStart {
	r := &cal.Rules
	out := []BookableStart{}
	if code, _ := checkDuration(r, d); code != "" {
		return out
	}
	g := newGrid(loc, stepMin, from, to)
	if r.MinNoticeMinutes > 0 {
		g.seek(now.Add(time.Duration(r.MinNoticeMinutes) * time.Minute))
	}
	var hours *openHours
	if hasHours(r) {
		hours = newOpenHours(r, loc, from, to.Add(d))
	}
	var busy spanSet
	tx.BusyNear(cal.ID, from, to.Add(d), func(iv data.Interval) bool {
		busy.spans = append(busy.spans, iv)
		return true
	})
	before := time.Duration(r.BufferBeforeMinutes) * time.Minute
	after := time.Duration(r.BufferAfterMinutes) * time.Minute
	var raw, buf []data.Interval
	tx.SlotsNear(cal.ID, from.Add(-before), to.Add(d+after), func(s data.SlotEntry) bool {
		if s.LiveAt(now) {
			raw = append(raw, s.Interval())
			buf = append(buf, s.Buffered())
		}
		return true
	})
	seats := r.Seats()
	taken, crowded := spanSet{spans: fullSpans(raw, seats)}, spanSet{spans: fullSpans(buf, seats)}
	for t, ok := g.next(); ok; t, ok = g.next() {
		if tooFar(r, t, now) {
			break // and so is every later start
		}
		if tooSoon(r, t, now) {
			continue
		}
		end := t.Add(d)
		if hours != nil {
			if closed, next := hours.closedUntil(t, end); closed {
				if next.IsZero() {
					break // no open time left
				}
				g.seek(next)
				continue
			}
			if !hours.within(data.Interval{Start: t, End: end}) {
				continue
			}
		}
		if busy.hits(t, end) || taken.hits(t, end) || crowded.hits(t.Add(-before), end.Add(after)) {
			continue
		}
		out = append(out, BookableStart{Start: t, Local: t.In(loc).Format(time.RFC3339)})
	}
	return out
}

// fullSpans returns, in start order, the spans of time in which at least
// seats of ivs overlap (ivs half-open; empty ones count for nothing, as in
// maxCoverage). For any window w, maxCoverage(ivs that overlap w, w) >=
// seats exactly when w overlaps one of them. With one seat that is every
// non-empty interval, sorted.
func fullSpans(ivs []data.Interval, seats int) []data.Interval {
	if seats <= 1 {
		out := make([]data.Interval, 0, len(ivs))
		for _, iv := range ivs {
			if iv.Start.Before(iv.End) {
				out = append(out, iv)
			}
		}
		if !slices.IsSortedFunc(out, byStart) {
			slices.SortStableFunc(out, byStart)
		}
		return out
	}
	type edge struct {
		t time.Time
		d int
	}
	edges := make([]edge, 0, 2*len(ivs))
	for _, iv := range ivs {
		if iv.Start.Before(iv.End) {
			edges = append(edges, edge{iv.Start, 1}, edge{iv.End, -1})
		}
	}
	// Ends before starts at the same instant: touching is no overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.t.Compare(b.t); c != 0 {
			return c
		}
		return a.d - b.d
	})
	var out []data.Interval
	var open time.Time
	n := 0
	for _, e := range edges {
		was := n
		n += e.d
		switch {
		case was < seats && n >= seats:
			open = e.t
		case was >= seats && n < seats && open.Before(e.t):
			out = append(out, data.Interval{Start: open, End: e.t})
		}
	}
	return out
}

func byStart(a, b data.Interval) int { return a.Start.Compare(b.Start) }

// spanSet answers, for a window [a, b) that only moves forward (neither a
// nor b ever decreases from one call to the next), whether one of its
// spans (sorted by start) overlaps the window: whether the spans that start
// before b reach past a. Each span is looked at once over all calls.
type spanSet struct {
	spans []data.Interval
	i     int
	reach time.Time // the latest end of spans[:i]
	any   bool      // i > 0
}

func (s *spanSet) hits(a, b time.Time) bool {
	for ; s.i < len(s.spans) && s.spans[s.i].Start.Before(b); s.i++ {
		if e := s.spans[s.i].End; !s.any || e.After(s.reach) {
			s.reach, s.any = e, true
		}
	}
	return s.any && s.reach.After(a)
}

// grid walks the candidate starts of an availability query in order: the
// whole UTC minutes in [from, to) whose wall-clock time in loc is a whole
// number of steps after local midnight, which is what aligned accepts (in
// local time a grid point can occur twice, at a DST fall-back, or not at
// all, at a spring-forward). Within a stretch of one UTC offset it steps
// from grid point to grid point, so its cost is the number of grid points,
// not of minutes. Times are Unix minutes.
type grid struct {
	loc      *time.Location
	step     int64 // minutes
	cur, end int64 // the next minute to look at; the first minute past the range
	segEnd   int64 // the first minute of the next UTC offset
	offMin   int64 // the UTC offset of [cur, segEnd) in minutes
	offWhole bool  // that offset is whole minutes (else no minute is on the grid)
}

const minutesPerDay = 24 * 60

func newGrid(loc *time.Location, stepMin int64, from, to time.Time) *grid {
	return &grid{loc: loc, step: max(stepMin, 1), cur: ceilMinute(from), end: ceilMinute(to), segEnd: math.MinInt64}
}

// seek moves the walk to the first grid point at or after t.
func (g *grid) seek(t time.Time) {
	g.cur = max(g.cur, ceilMinute(t))
}

func (g *grid) next() (time.Time, bool) {
	for g.cur < g.end {
		if g.cur >= g.segEnd {
			g.zoneAt(g.cur)
		}
		if !g.offWhole {
			g.cur = g.segEnd
			continue
		}
		mod := floorMod(g.cur+g.offMin, minutesPerDay)
		if r := mod % g.step; r != 0 {
			// The next grid point of this local day, or local midnight;
			// never past an offset change, where the grid shifts.
			skip := minutesPerDay - mod
			if nxt := mod - r + g.step; nxt < minutesPerDay {
				skip = nxt - mod
			}
			g.cur = min(g.cur+skip, g.segEnd)
			continue
		}
		t := time.Unix(g.cur*60, 0).UTC()
		g.cur++
		return t, true
	}
	return time.Time{}, false
}

// zoneAt loads the UTC offset in force at minute m and when it ends.
func (g *grid) zoneAt(m int64) {
	lt := time.Unix(m*60, 0).In(g.loc)
	_, off := lt.Zone()
	_, end := lt.ZoneBounds()
	g.segEnd = math.MaxInt64
	if !end.IsZero() {
		g.segEnd = max(ceilMinute(end), m+1)
	}
	g.offMin, g.offWhole = int64(off/60), off%60 == 0
}

// ceilMinute is the first whole Unix minute at or after t.
func ceilMinute(t time.Time) int64 {
	s := t.Unix()
	m := floorDiv(s, 60)
	if s != m*60 || t.Nanosecond() != 0 {
		m++
	}
	return m
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }
