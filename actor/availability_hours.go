package actor

import (
	"time"

	"github.com/bookline/bookline/data"
)

// openHours answers withinHours for the starts of one availability sweep,
// taken in increasing order, by computing what withinHours computes: for
// each interval the same window of local dates (from the date before its
// start to the date after its end, as withinHours finds them, DST and
// skipped dates included) and openStretches's stretches over it. Starts
// close together share their window, so a window's stretches are joined
// once, and each date's open ranges are read from the rules once.
//
// Stretches over the whole range (wide) let the sweep skip closed time: a
// window's dates are among the range's, so an interval outside every wide
// stretch is outside every stretch of its window too.
type openHours struct {
	r      *data.Rules
	loc    *time.Location
	ranges map[int][]data.Interval // open ranges per local date (y*10000+m*100+d)

	wide []data.Interval
	wi   int // wide[:wi] end at or before the current start

	noons     []time.Time // the window's days from its first: noon, as openStretches steps
	count     int         // noons[:count] are the current window's days
	stretches []data.Interval
	buf       []data.Interval
}

// wideMargin widens the range on each side: withinHours looks a day
// beyond an interval, and a local date that does not exist (a zone that
// skipped a day) moves a wall-clock time by up to a day more.
const wideMargin = 3

func newOpenHours(r *data.Rules, loc *time.Location, from, to time.Time) *openHours {
	h := &openHours{r: r, loc: loc, ranges: map[int][]data.Interval{}}
	last := to.In(loc).AddDate(0, 0, wideMargin)
	var open []data.Interval
	for day := firstNoon(loc, from.In(loc).AddDate(0, 0, -wideMargin)); !day.After(last); day = day.AddDate(0, 0, 1) {
		open = append(open, h.rangesOn(day)...)
	}
	h.wide = joinOpen(open)
	return h
}

// rangesOn is appendOpenRanges of day's date, read once per date. The
// caller must not change the slice.
func (h *openHours) rangesOn(day time.Time) []data.Interval {
	y, m, d := day.Date()
	k := y*10000 + int(m)*100 + d
	rs, ok := h.ranges[k]
	if !ok {
		rs = appendOpenRanges(nil, h.r, h.loc, day)
		h.ranges[k] = rs
	}
	return rs
}

// closedUntil reports, for a start t of an interval [t, end), whether the
// interval lies outside every wide stretch, and if so the time before which
// no later start's interval lies inside one (zero: none ever does).
func (h *openHours) closedUntil(t, end time.Time) (closed bool, next time.Time) {
	for h.wi < len(h.wide) && !h.wide[h.wi].End.After(t) {
		h.wi++
	}
	if h.wi == len(h.wide) {
		return true, time.Time{}
	}
	switch w := h.wide[h.wi]; {
	case w.Start.After(t):
		return true, w.Start
	case w.End.Before(end):
		return true, w.End
	}
	return false, time.Time{}
}

// within is withinHours(h.r, h.loc, iv) (hasHours being true).
func (h *openHours) within(iv data.Interval) bool {
	first := iv.Start.In(h.loc).AddDate(0, 0, -1)
	last := iv.End.In(h.loc).AddDate(0, 0, 1)
	if fn := firstNoon(h.loc, first); len(h.noons) == 0 || !h.noons[0].Equal(fn) {
		h.noons, h.count, h.stretches = append(h.noons[:0], fn), -1, nil
	}
	n := 0
	for {
		if n == len(h.noons) {
			h.noons = append(h.noons, h.noons[n-1].AddDate(0, 0, 1))
		}
		if h.noons[n].After(last) {
			break
		}
		n++
	}
	if n != h.count {
		h.buf = h.buf[:0]
		for _, day := range h.noons[:n] {
			h.buf = append(h.buf, h.rangesOn(day)...)
		}
		h.stretches, h.count = joinOpen(h.buf), n
	}
	for _, s := range h.stretches {
		if !s.Start.After(iv.Start) && !s.End.Before(iv.End) {
			return true
		}
	}
	return false
}
