package actor

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"sync"
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
// (to - from) / step rounded up. The grid itself can hold a few more: the
// repeated hour of a DST fall-back, and one a local day when the step does
// not divide a day (the grid restarts at each local midnight).
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
	sc := scratchPool.Get().(*sweepScratch)
	defer scratchPool.Put(sc)
	sc.local, sc.ends = sc.local[:0], sc.ends[:0]
	base := from
	at := func(t time.Time) time.Duration { return t.Sub(base) }
	sc.busy = sc.busy[:0]
	tx.BusyNear(cal.ID, from, to.Add(d), func(iv data.Interval) bool {
		sc.busy = append(sc.busy, span{at(iv.Start), at(iv.End)})
		return true
	})
	before := time.Duration(r.BufferBeforeMinutes) * time.Minute
	after := time.Duration(r.BufferAfterMinutes) * time.Minute
	sc.raw, sc.buf = sc.raw[:0], sc.buf[:0]
	tx.SlotTimesNear(cal.ID, from.Add(-before), to.Add(d+after), func(s data.SlotEntry) bool {
		if s.LiveAt(now) {
			sc.raw = append(sc.raw, span{at(s.Start), at(s.End)})
			sc.buf = append(sc.buf, span{at(s.Start.Add(-s.BufferBefore)), at(s.End.Add(s.BufferAfter))})
		}
		return true
	})
	seats := r.Seats()
	busy := spanSet{spans: sc.busy}
	taken := spanSet{spans: sc.fullSpans(&sc.rawFull, sc.raw, seats)}
	crowded := spanSet{spans: sc.fullSpans(&sc.bufFull, sc.buf, seats)}
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
		a, b := at(t), at(end)
		if busy.hits(a, b) || taken.hits(a, b) || crowded.hits(a-before, b+after) {
			continue
		}
		out = append(out, BookableStart{Start: t})
		sc.local = t.In(loc).AppendFormat(sc.local, time.RFC3339)
		sc.ends = append(sc.ends, len(sc.local))
	}
	// The local times share one string: one allocation, not one a start.
	local, at0 := string(sc.local), 0
	for i, e := range sc.ends {
		out[i].Local, at0 = local[at0:e], e
	}
	return out
}

// span is an interval [a, b) as offsets from a sweep's base time (its
// from). A sweep compares times within some weeks of its base; t.Sub
// saturates beyond ±292 years, where nothing overlaps the range anyway.
// Spans hold no pointer, unlike time.Time, so the garbage collector need
// not scan them.
type span struct{ a, b time.Duration }

type edge struct {
	t time.Duration
	d int
}

// sweepScratch holds a sweep's buffers, kept for the next one: a query
// may read thousands of entries, and its buffers would otherwise be most
// of its allocations.
type sweepScratch struct {
	busy, raw, buf   []span
	rawFull, bufFull []span
	edges            []edge
	local            []byte // the listed starts' local times, one after another
	ends             []int  // where each ends in local
}

var scratchPool = sync.Pool{New: func() any { return new(sweepScratch) }}

// fullSpans returns, in start order, the spans of time in which at least
// seats of ivs overlap (ivs half-open; empty ones count for nothing, as in
// maxCoverage). For any window w, maxCoverage(ivs that overlap w, w) >=
// seats exactly when w overlaps one of them. With one seat that is every
// non-empty interval of ivs (which it reuses), sorted; otherwise the
// result is built in *out.
func (sc *sweepScratch) fullSpans(out *[]span, ivs []span, seats int) []span {
	if seats <= 1 {
		full := ivs[:0]
		for _, iv := range ivs {
			if iv.a < iv.b {
				full = append(full, iv)
			}
		}
		byStart := func(x, y span) int { return cmp.Compare(x.a, y.a) }
		if !slices.IsSortedFunc(full, byStart) {
			slices.SortStableFunc(full, byStart)
		}
		return full
	}
	sc.edges = sc.edges[:0]
	for _, iv := range ivs {
		if iv.a < iv.b {
			sc.edges = append(sc.edges, edge{iv.a, 1}, edge{iv.b, -1})
		}
	}
	// Ends before starts at the same instant: touching is no overlap.
	slices.SortFunc(sc.edges, func(x, y edge) int {
		if c := cmp.Compare(x.t, y.t); c != 0 {
			return c
		}
		return x.d - y.d
	})
	full := (*out)[:0]
	var open time.Duration
	n := 0
	for _, e := range sc.edges {
		was := n
		n += e.d
		switch {
		case was < seats && n >= seats:
			open = e.t
		case was >= seats && n < seats && open < e.t:
			full = append(full, span{open, e.t})
		}
	}
	*out = full
	return full
}

// spanSet answers, for a window [a, b) that only moves forward (neither a
// nor b ever decreases from one call to the next), whether one of its
// spans (sorted by start) overlaps the window: whether the spans that start
// before b reach past a. Each span is looked at once over all calls.
type spanSet struct {
	spans []span
	i     int
	reach time.Duration // the latest end of spans[:i]
}

func (s *spanSet) hits(a, b time.Duration) bool {
	for ; s.i < len(s.spans) && s.spans[s.i].a < b; s.i++ {
		if e := s.spans[s.i].b; s.i == 0 || e > s.reach {
			s.reach = e
		}
	}
	return s.i > 0 && s.reach > a
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
