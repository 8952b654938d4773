package actor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bookline/bookline/data"
)

// Limits of rule values.
const (
	MaxRuleIntervals  = 1000
	MaxBufferMinutes  = 24 * 60
	MaxNoticeMinutes  = 365 * 24 * 60
	MaxHorizonDays    = 3650
	MaxCapacity       = 1000
	DefaultHoldTTL    = 5 * time.Minute
	DefaultMaxHoldTTL = time.Hour
	MaxHoldTTL        = 24 * time.Hour
)

var weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

var weekdayKey = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// weekOrder is the order weekly hours are checked and reported in.
var weekOrder = [7]string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

// weeklyHoursOrder lists the keys of weekly hours mon..sun, then the keys
// that are not weekdays, sorted.
func weeklyHoursOrder(wh map[string][]data.TimeRange) []string {
	keys := make([]string, 0, len(wh))
	for _, d := range weekOrder {
		if _, ok := wh[d]; ok {
			keys = append(keys, d)
		}
	}
	var other []string
	for d := range wh {
		if _, ok := weekdays[d]; !ok {
			other = append(other, d)
		}
	}
	slices.Sort(other)
	return append(keys, other...)
}

// parseClock parses "HH:MM" (00:00..24:00) into minutes since midnight.
func parseClock(s string) (int, bool) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) != 2 || len(m) != 2 {
		return 0, false
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hh < 0 || mm < 0 || mm > 59 || hh > 24 || (hh == 24 && mm != 0) {
		return 0, false
	}
	return hh*60 + mm, true
}

func validateRanges(field string, rs []data.TimeRange) []FieldError {
	var errs []FieldError
	for i, r := range rs {
		a, ok1 := parseClock(r.Start)
		b, ok2 := parseClock(r.End)
		switch {
		case !ok1 || !ok2:
			errs = append(errs, FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Message: `times must be "HH:MM" from 00:00 to 24:00`})
		case a >= b:
			errs = append(errs, FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Message: "end must be after start"})
		}
	}
	return errs
}

// ValidateRules checks a calendar's rules.
func ValidateRules(r *data.Rules) []FieldError {
	var errs []FieldError
	add := func(f, m string) { errs = append(errs, FieldError{Field: f, Message: m}) }
	n := 0
	// In a fixed order, never the map's: the details are part of a
	// recorded rejection, which every replay must reproduce byte for byte.
	for _, day := range weeklyHoursOrder(r.WeeklyHours) {
		rs := r.WeeklyHours[day]
		if _, ok := weekdays[day]; !ok {
			add("weekly_hours."+day, "weekday must be one of mon, tue, wed, thu, fri, sat, sun")
		}
		n += len(rs)
		errs = append(errs, validateRanges("weekly_hours."+day, rs)...)
	}
	seen := map[string]bool{}
	for i, o := range r.DateOverrides {
		f := fmt.Sprintf("date_overrides[%d]", i)
		if _, err := time.Parse(time.DateOnly, o.Date); err != nil {
			add(f+".date", "must be a date YYYY-MM-DD")
		} else if seen[o.Date] {
			add(f+".date", "date listed twice")
		}
		seen[o.Date] = true
		if o.Closed && len(o.Hours) > 0 {
			add(f, "closed and hours are exclusive")
		}
		n += len(o.Hours) + 1
		errs = append(errs, validateRanges(f+".hours", o.Hours)...)
	}
	if n > MaxRuleIntervals {
		add("weekly_hours", fmt.Sprintf("at most %d intervals and overrides in all", MaxRuleIntervals))
	}
	maxDur := int(MaxBookingDuration / time.Minute)
	inRange := func(f string, v, lo, hi int) {
		if v < lo || v > hi {
			add(f, fmt.Sprintf("must be from %d to %d", lo, hi))
		}
	}
	inRange("slot_step_minutes", r.SlotStepMinutes, 0, 24*60)
	inRange("min_duration_minutes", r.MinDurationMinutes, 0, maxDur)
	inRange("max_duration_minutes", r.MaxDurationMinutes, 0, maxDur)
	if r.MaxDurationMinutes > 0 && r.MinDurationMinutes > r.MaxDurationMinutes {
		add("min_duration_minutes", "must not exceed max_duration_minutes")
	}
	if len(r.AllowedDurationsMinutes) > 100 {
		add("allowed_durations_minutes", "at most 100 entries")
	}
	for i, d := range r.AllowedDurationsMinutes {
		inRange(fmt.Sprintf("allowed_durations_minutes[%d]", i), d, 1, maxDur)
	}
	inRange("buffer_before_minutes", r.BufferBeforeMinutes, 0, MaxBufferMinutes)
	inRange("buffer_after_minutes", r.BufferAfterMinutes, 0, MaxBufferMinutes)
	inRange("min_notice_minutes", r.MinNoticeMinutes, 0, MaxNoticeMinutes)
	inRange("horizon_days", r.HorizonDays, 0, MaxHorizonDays)
	inRange("capacity", r.Capacity, 0, MaxCapacity)
	inRange("max_hold_ttl_seconds", r.MaxHoldTTLSeconds, 0, int(MaxHoldTTL/time.Second))
	return errs
}

// hasHours reports whether the calendar restricts opening hours at all.
func hasHours(r *data.Rules) bool { return r.WeeklyHours != nil || len(r.DateOverrides) > 0 }

// openOn returns the open wall-clock ranges (minutes since midnight) of a
// local date.
func openOn(r *data.Rules, y int, m time.Month, d int) [][2]int {
	date := fmt.Sprintf("%04d-%02d-%02d", y, m, d)
	ranges := r.WeeklyHours[weekdayKey[time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday()]]
	if r.WeeklyHours == nil {
		ranges = []data.TimeRange{{Start: "00:00", End: "24:00"}}
	}
	for _, o := range r.DateOverrides {
		if o.Date == date {
			ranges = o.Hours
			if o.Closed {
				ranges = nil
			}
		}
	}
	out := make([][2]int, 0, len(ranges))
	for _, tr := range ranges {
		a, _ := parseClock(tr.Start)
		b, _ := parseClock(tr.End)
		out = append(out, [2]int{a, b})
	}
	return out
}

// localTime is the instant of local wall-clock minute min on a date. Wall
// times that do not exist (a DST gap) resolve as Go's time.Date does.
func localTime(loc *time.Location, y int, m time.Month, d, min int) time.Time {
	return time.Date(y, m, d, 0, min, 0, 0, loc)
}

// withinHours reports whether iv lies inside one stretch of open time
// (adjacent open ranges, also across midnight, join into one stretch).
func withinHours(r *data.Rules, loc *time.Location, iv data.Interval) bool {
	if !hasHours(r) {
		return true
	}
	for _, s := range openStretches(r, loc, iv.Start.In(loc).AddDate(0, 0, -1), iv.End.In(loc).AddDate(0, 0, 1)) {
		if !s.Start.After(iv.Start) && !s.End.Before(iv.End) {
			return true
		}
	}
	return false
}

// openStretches joins the open ranges of the local dates from first's to
// last's (last's only when its noon is not after last) into stretches of
// open time, in start order: overlapping or touching ranges, also across
// midnight, become one; empty ranges (a DST gap) are dropped. withinHours
// and the availability sweep both read opening hours through it and its
// parts.
func openStretches(r *data.Rules, loc *time.Location, first, last time.Time) []data.Interval {
	var open []data.Interval
	for day := firstNoon(loc, first); !day.After(last); day = day.AddDate(0, 0, 1) {
		open = appendOpenRanges(open, r, loc, day)
	}
	return joinOpen(open)
}

// firstNoon is noon of first's local date, where openStretches starts.
func firstNoon(loc *time.Location, first time.Time) time.Time {
	first = first.In(loc)
	return time.Date(first.Year(), first.Month(), first.Day(), 12, 0, 0, 0, loc)
}

// appendOpenRanges appends the open ranges of day's local date.
func appendOpenRanges(open []data.Interval, r *data.Rules, loc *time.Location, day time.Time) []data.Interval {
	y, m, d := day.Date()
	for _, rg := range openOn(r, y, m, d) {
		open = append(open, data.Interval{Start: localTime(loc, y, m, d, rg[0]), End: localTime(loc, y, m, d, rg[1])})
	}
	return open
}

// joinOpen sorts open ranges (in place) and joins them into stretches.
func joinOpen(open []data.Interval) []data.Interval {
	slices.SortFunc(open, func(a, b data.Interval) int { return a.Start.Compare(b.Start) })
	var out []data.Interval
	for _, o := range open {
		if !o.Start.Before(o.End) {
			continue
		}
		if n := len(out); n == 0 || out[n-1].End.Before(o.Start) {
			out = append(out, o)
		} else if o.End.After(out[n-1].End) {
			out[n-1].End = o.End
		}
	}
	return out
}

// aligned reports whether t falls on the calendar's slot grid in local time.
func aligned(r *data.Rules, loc *time.Location, t time.Time) bool {
	if r.SlotStepMinutes <= 0 {
		return true
	}
	lt := t.In(loc)
	if lt.Second() != 0 || lt.Nanosecond() != 0 {
		return false
	}
	return (lt.Hour()*60+lt.Minute())%r.SlotStepMinutes == 0
}

// checkStatic checks the rules that depend on the calendar and "now" only.
func checkStatic(r *data.Rules, loc *time.Location, iv data.Interval, now time.Time) (code, msg string) {
	if code, msg := checkDuration(r, iv.End.Sub(iv.Start)); code != "" {
		return code, msg
	}
	switch {
	case !aligned(r, loc, iv.Start):
		return CodeMisaligned, fmt.Sprintf("start must fall on the %d-minute grid in %s", r.SlotStepMinutes, loc)
	case tooSoon(r, iv.Start, now):
		return CodeTooSoon, fmt.Sprintf("bookings need %d minutes notice", r.MinNoticeMinutes)
	case tooFar(r, iv.Start, now):
		return CodeTooFar, fmt.Sprintf("bookings may start at most %d days ahead", r.HorizonDays)
	case !withinHours(r, loc, iv):
		return CodeOutsideHours, "outside the calendar's opening hours"
	}
	return "", ""
}

// DurationAllowed reports whether the duration rules of r accept a booking
// of d: what a page offering several calendars needs to know of each.
func DurationAllowed(r *data.Rules, d time.Duration) bool {
	code, _ := checkDuration(r, d)
	return code == ""
}

// checkDuration checks a booking's length against the duration rules.
func checkDuration(r *data.Rules, d time.Duration) (code, msg string) {
	mins := d / time.Minute
	switch {
	case len(r.AllowedDurationsMinutes) > 0 && (d%time.Minute != 0 || !slices.Contains(r.AllowedDurationsMinutes, int(mins))):
		return CodeDurationNotAllowed, fmt.Sprintf("duration must be one of %v minutes", r.AllowedDurationsMinutes)
	case r.MinDurationMinutes > 0 && d < time.Duration(r.MinDurationMinutes)*time.Minute:
		return CodeDurationNotAllowed, fmt.Sprintf("duration must be at least %d minutes", r.MinDurationMinutes)
	case r.MaxDurationMinutes > 0 && d > time.Duration(r.MaxDurationMinutes)*time.Minute:
		return CodeDurationNotAllowed, fmt.Sprintf("duration must be at most %d minutes", r.MaxDurationMinutes)
	}
	return "", ""
}

// tooSoon reports whether start is closer to now than the minimum notice.
func tooSoon(r *data.Rules, start, now time.Time) bool {
	return r.MinNoticeMinutes > 0 && start.Before(now.Add(time.Duration(r.MinNoticeMinutes)*time.Minute))
}

// tooFar reports whether start lies beyond the horizon.
func tooFar(r *data.Rules, start, now time.Time) bool {
	return r.HorizonDays > 0 && start.After(now.Add(time.Duration(r.HorizonDays)*24*time.Hour))
}

// maxCoverage is the greatest number of ivs covering one instant of w.
func maxCoverage(ivs []data.Interval, w data.Interval) int {
	type edge struct {
		t time.Time
		d int
	}
	edges := make([]edge, 0, 2*len(ivs))
	for _, iv := range ivs {
		s, e := iv.Start, iv.End
		if s.Before(w.Start) {
			s = w.Start
		}
		if e.After(w.End) {
			e = w.End
		}
		if s.Before(e) {
			edges = append(edges, edge{s, 1}, edge{e, -1})
		}
	}
	// Ends sort before starts at the same instant: touching is no overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.t.Compare(b.t); c != 0 {
			return c
		}
		return a.d - b.d
	})
	n, best := 0, 0
	for _, e := range edges {
		n += e.d
		best = max(best, n)
	}
	return best
}

// verdict is the outcome of checking an interval against a calendar.
type verdict struct {
	code, msg string
	conflict  *data.Interval
	// conflictID is the booking of conflict, for slot_taken.
	conflictID string
}

// decideInterval decides whether iv may be booked (or held) on cal at now, with the
// calendar's current buffers around it; ignore is a booking id to leave out
// (the booking being rescheduled). It is the one decision function: the
// writer and the availability query both use it, so they cannot disagree.
func decideInterval(tx *data.Tx, cal *data.Calendar, loc *time.Location, iv data.Interval, now time.Time, ignore string) verdict {
	return decideIntervalAmong(tx, cal, loc, iv, now, ignore, nil)
}

// decideIntervalAmong is decideInterval with pending, intervals the same
// command books before iv (the earlier occurrences of a series, with the
// calendar's current buffers), counted as if they were in the index.
func decideIntervalAmong(tx *data.Tx, cal *data.Calendar, loc *time.Location, iv data.Interval, now time.Time, ignore string, pending []data.Interval) verdict {
	r := &cal.Rules
	if code, msg := checkStatic(r, loc, iv, now); code != "" {
		return verdict{code: code, msg: msg}
	}
	// External busy time blocks every seat of the interval.
	if _, busy, ok := tx.FirstBusy(cal.ID, iv); ok {
		return verdict{code: CodeExternalBusy, msg: "the requested interval is busy in the linked calendar", conflict: &busy}
	}
	before := time.Duration(r.BufferBeforeMinutes) * time.Minute
	after := time.Duration(r.BufferAfterMinutes) * time.Minute
	buffered := data.Interval{Start: iv.Start.Add(-before), End: iv.End.Add(after)}
	var raw, buf []data.Interval
	var first *data.Interval
	var firstID string
	tx.SlotsNear(cal.ID, buffered.Start, buffered.End, func(s data.SlotEntry) bool {
		if s.ID == ignore || !s.LiveAt(now) {
			return true
		}
		if si := s.Interval(); si.Overlaps(iv) {
			raw = append(raw, si)
			if first == nil {
				first, firstID = &si, s.ID
			}
		}
		if sb := s.Buffered(); sb.Overlaps(buffered) {
			buf = append(buf, sb)
		}
		return true
	})
	for _, pi := range pending {
		if pi.Overlaps(iv) {
			raw = append(raw, pi)
			if first == nil {
				first = &pi
			}
		}
		if pb := (data.Interval{Start: pi.Start.Add(-before), End: pi.End.Add(after)}); pb.Overlaps(buffered) {
			buf = append(buf, pb)
		}
	}
	seats := r.Seats()
	if maxCoverage(raw, iv) >= seats {
		return verdict{code: CodeSlotTaken, msg: "the requested interval is fully booked", conflict: first, conflictID: firstID}
	}
	if maxCoverage(buf, buffered) >= seats {
		return verdict{code: CodeBufferConflict, msg: "the interval with its buffers overlaps another booking's buffers"}
	}
	return verdict{}
}
