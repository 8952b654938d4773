package actor

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bookline/bookline/data"
)

// Recurring series (schema version 3): a booking.create whose booking has a
// recurrence books every occurrence or none (or, with on_conflict skip,
// every free one) in one decision of the calendar's writer, and a
// booking.cancel with scope following cancels an occurrence and those
// after it. A series lives on one calendar, so one partition decides it
// whole: no coordination, and a replay expands and decides it the same.

// SeriesSchemaVersion is the schema version that defines series: the
// booking's recurrence and on_conflict, and booking.cancel's scope. A
// command of a lower version that carries them is decided as before
// version 3 was defined: they are ignored (docs/protocol.md, "Versions").
const SeriesSchemaVersion = 3

// MaxOccurrences bounds a series (a year of days): a series is decided in
// one transaction, and its reply lists every occurrence.
const MaxOccurrences = 366

// Recurrence frequencies, on_conflict values and the cancel scope.
const (
	FreqDaily      = "daily"
	FreqWeekly     = "weekly"
	OnConflictFail = "fail"
	OnConflictSkip = "skip"
	ScopeFollowing = "following"
)

// Statuses of a reply's occurrences besides the booking statuses
// (confirmed, cancelled): refused is the occurrence that refused a series
// decided with on_conflict fail, skipped one left out with skip.
const (
	OccurrenceRefused = "refused"
	OccurrenceSkipped = "skipped"
)

// RecurrenceSpec is a booking's recurrence: every interval days (daily) or
// weeks (weekly), at the first occurrence's wall-clock time in the
// calendar's time zone, count times or until a time (inclusive: the last
// occurrence starts at or before it).
type RecurrenceSpec struct {
	Freq     string    `json:"freq"`
	Interval int       `json:"interval,omitempty"`
	Count    int       `json:"count,omitempty"`
	Until    time.Time `json:"until,omitzero"`
	// unreadable is set when the member was not an object of these
	// fields and types.
	unreadable bool
}

// UnmarshalJSON reads a recurrence and never fails: a command of a version
// before 3 may carry a member named recurrence of any shape (its decoder
// ignored it), and must be decided as before; a version 3 command whose
// recurrence is unreadable is refused by Validate with the field named.
func (r *RecurrenceSpec) UnmarshalJSON(b []byte) error {
	type plain RecurrenceSpec
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		*r = RecurrenceSpec{unreadable: true}
		return nil
	}
	*r = RecurrenceSpec(p)
	return nil
}

// LenientString is a string member that a command before version 3 may
// carry with any JSON value: decoding never fails, and a value that is
// not a string reads as notAString, which no rule accepts.
type LenientString string

const notAString LenientString = "\x00not a string"

// UnmarshalJSON reads a string, or notAString for any other value.
func (s *LenientString) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		*s = notAString
		return nil
	}
	*s = LenientString(v)
	return nil
}

// Occurrence is one occurrence of a series in a reply.
type Occurrence struct {
	Index  int       `json:"index"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Status string    `json:"status"`
	// BookingID is the occurrence's booking (absent when it was not
	// booked).
	BookingID string `json:"booking_id,omitempty"`
	// Code and Conflict say why an occurrence was refused or skipped, as
	// a rejection of a booking on its own would.
	Code     string         `json:"code,omitempty"`
	Conflict *data.Interval `json:"conflict,omitempty"`
}

// MinVersion is the lowest schema version that expresses c: the one a
// producer writes, so that every build that can decide c can read it
// (docs/protocol.md, "Versions").
func (c *Command) MinVersion() int {
	if c.Type == TypeCollectiveFence || c.Type == TypeCollectiveCommits {
		return CollectiveVotesSchemaVersion
	}
	if c.Move != nil || isMoveType(c.Type) {
		return CollectiveMoveSchemaVersion
	}
	if c.Collective != nil || c.Pool != nil || isCollectiveType(c.Type) || isPoolType(c.Type) {
		return CollectiveSchemaVersion
	}
	if c.hasSeriesFields() {
		return SeriesSchemaVersion
	}
	return SchemaVersion
}

// SeriesCount is how many occurrences a recurrence can make at most, as
// far as the command alone tells (the writer counts exactly, in the
// calendar's time zone): the cost budget of a series.
func SeriesCount(b *BookingSpec) int {
	r := b.Recurrence
	if r == nil {
		return 1
	}
	if r.Count > 0 {
		return min(r.Count, MaxOccurrences)
	}
	step := max(r.Interval, 1)
	if r.Freq == FreqWeekly {
		step *= 7
	}
	days := int(r.Until.Sub(b.Start) / (24 * time.Hour))
	return min(max(days/step+2, 1), MaxOccurrences)
}

// hasSeriesFields reports whether c uses a member that version 3 defines.
func (c *Command) hasSeriesFields() bool {
	return c.Scope != "" || c.Booking != nil && (c.Booking.Recurrence != nil || c.Booking.OnConflict != "")
}

// dropSeriesFields forgets the members of version 3 in a command of an
// earlier version, whose decoder did not know them.
func (c *Command) dropSeriesFields() {
	c.Scope = ""
	if c.Booking != nil {
		c.Booking.Recurrence, c.Booking.OnConflict = nil, ""
	}
}

// validateSeries checks the members of version 3 (and normalises them).
func (c *Command) validateSeries() []FieldError {
	var errs []FieldError
	add := func(f, m string) { errs = append(errs, FieldError{Field: f, Message: m}) }
	if c.Scope != "" && (c.Type != TypeBookingCancel || c.Scope != ScopeFollowing) {
		add("scope", "only booking.cancel has a scope, and its one value is following")
	}
	b := c.Booking
	if b == nil || c.Type != TypeBookingCreate && c.Type != TypeHoldCreate {
		return errs
	}
	switch {
	case b.OnConflict != "" && b.Recurrence == nil:
		add("on_conflict", "only a booking with a recurrence has on_conflict")
	case b.OnConflict != "" && b.OnConflict != OnConflictFail && b.OnConflict != OnConflictSkip:
		add("on_conflict", "must be fail or skip")
	}
	r := b.Recurrence
	if r == nil {
		return errs
	}
	if r.unreadable {
		add("recurrence", "must be an object: freq (daily or weekly), interval (a positive integer) and count or until (an RFC 3339 time)")
		return errs
	}
	days := 1
	switch r.Freq {
	case FreqDaily:
	case FreqWeekly:
		days = 7
	default:
		add("recurrence.freq", "must be daily or weekly")
	}
	if r.Interval == 0 {
		r.Interval = 1
	}
	if r.Interval < 1 || r.Interval*days > 366 {
		add("recurrence.interval", "must be from 1 to 366 days (52 weeks)")
	}
	switch {
	case (r.Count == 0) == r.Until.IsZero():
		add("recurrence", "needs exactly one of count and until")
	case r.Count < 0 || r.Count > MaxOccurrences:
		add("recurrence.count", fmt.Sprintf("must be from 1 to %d", MaxOccurrences))
	case r.Count > 0:
		if r.Interval >= 1 && b.Start.AddDate(0, 0, (r.Count-1)*r.Interval*days).Year() > MaxYear {
			add("recurrence.count", fmt.Sprintf("makes occurrences after year %d", MaxYear))
		}
	case r.Count == 0:
		var ends []FieldError
		until := r.Until
		if until.Year() < MinYear || until.Year() > MaxYear {
			ends = append(ends, FieldError{Field: "recurrence.until", Message: TimeRangeMessage})
		} else if until.Before(b.Start) {
			ends = append(ends, FieldError{Field: "recurrence.until", Message: "must not be before start"})
		} else if r.Interval >= 1 && until.Sub(b.Start) > time.Duration(MaxOccurrences*r.Interval*days+1)*24*time.Hour {
			// The writer counts exactly, in the calendar's time zone;
			// this only keeps what cannot fit out of the log.
			ends = append(ends, FieldError{Field: "recurrence.until", Message: fmt.Sprintf("makes more than %d occurrences", MaxOccurrences)})
		}
		errs = append(errs, ends...)
		r.Until = until.UTC()
	}
	return errs
}

// fpSeriesV3 is what a version 3 command adds to its fingerprint's body:
// a series and its retry are the same request only with the same
// recurrence, on_conflict and scope.
type fpSeriesV3 struct {
	Recurrence *RecurrenceSpec `json:"recurrence,omitempty"`
	OnConflict LenientString   `json:"on_conflict,omitempty"`
	Scope      LenientString   `json:"scope,omitempty"`
}

// seriesFingerprint is the bytes a version 3 command's fingerprint adds,
// nil for a command without version 3 members (whose fingerprint is its
// version 1 body's, so a retry of it under version 1 is the same request).
func (c *Command) seriesFingerprint() []byte {
	if c.V < SeriesSchemaVersion || !c.hasSeriesFields() {
		return nil
	}
	f := fpSeriesV3{Scope: c.Scope}
	if b := c.Booking; b != nil {
		f.Recurrence, f.OnConflict = b.Recurrence, b.OnConflict
	}
	out, _ := json.Marshal(f)
	return out
}

// expandSeries lists the intervals of spec's occurrences in loc, in order:
// the first is spec's own, each next one interval days or weeks later at
// the same wall-clock time, as long as the recurrence lasts. ok is false
// when there are more than MaxOccurrences.
func expandSeries(spec *BookingSpec, loc *time.Location) (occ []data.Interval, ok bool) {
	r := spec.Recurrence
	step := r.Interval
	if r.Freq == FreqWeekly {
		step *= 7
	}
	dur := spec.End.Sub(spec.Start)
	local := spec.Start.In(loc)
	y, m, d := local.Date()
	hh, mm, ss := local.Clock()
	for k := 0; r.Count == 0 || k < r.Count; k++ {
		t := spec.Start
		if k > 0 {
			t = wallTime(y, m, d+k*step, hh, mm, ss, local.Nanosecond(), loc)
		}
		if r.Count == 0 && t.After(r.Until) {
			break
		}
		if len(occ) == MaxOccurrences {
			return occ, false
		}
		occ = append(occ, data.Interval{Start: t, End: t.Add(dur)})
	}
	return occ, true
}

// wallTime is the instant of a wall-clock time in loc, as RFC 5545 (3.3.5)
// resolves it across a change of UTC offset: a time that occurs twice
// (clocks go back) is its first instant; a time that does not occur
// (clocks go forward) is read with the offset before the gap, so 02:30 on
// the night clocks go from 02:00 to 03:00 is 03:30. time.Date leaves both
// cases unspecified, and a replay must find the same instants.
func wallTime(y int, m time.Month, d, hh, mm, ss, ns int, loc *time.Location) time.Time {
	w := time.Date(y, m, d, hh, mm, ss, ns, time.UTC) // the wall clock read as UTC
	// The offsets in force within a day and a half before and after:
	// every zone changes its offset at most once in such a span.
	_, before := w.Add(-36 * time.Hour).In(loc).Zone()
	_, after := w.Add(36 * time.Hour).In(loc).Zone()
	var best time.Time
	for _, off := range [2]int{before, after} {
		t := w.Add(-time.Duration(off) * time.Second)
		if sameWall(t.In(loc), w) && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	if best.IsZero() {
		best = w.Add(-time.Duration(before) * time.Second)
	}
	return best.UTC()
}

// sameWall reports whether t reads w's wall clock.
func sameWall(t, w time.Time) bool {
	y1, m1, d1 := t.Date()
	y2, m2, d2 := w.Date()
	return y1 == y2 && m1 == m2 && d1 == d2 && t.Hour() == w.Hour() && t.Minute() == w.Minute() &&
		t.Second() == w.Second() && t.Nanosecond() == w.Nanosecond()
}

// createSeries decides a booking.create with a recurrence: every
// occurrence is decided by decideInterval, as a booking on its own would
// be, with the occurrences before it counted as booked. With on_conflict
// fail (the default) the first refused occurrence refuses the series and
// nothing is written; with skip the refused ones are left out, and the
// series is refused only when none is free. The reply lists the
// occurrences; its booking is the first one booked. The request record is
// one of its own (the reply is not a plain creation).
func createSeries(tx *data.Tx, d *Decoded) (Reply, error) {
	spec := d.Cmd.Booking
	cal, loc, rej, err := calendarFor(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	hold := d.Cmd.Type == TypeHoldCreate
	status, expires := data.StatusConfirmed, (*time.Time)(nil)
	if hold {
		ttl, rej := holdTTL(d, &cal)
		if rej != nil {
			return *rej, nil
		}
		exp := d.At.Add(ttl)
		status, expires = data.StatusHeld, &exp
	}
	occ, ok := expandSeries(spec, loc)
	if !ok || len(occ) == 0 {
		// None is kept out by validation; more than MaxOccurrences can
		// only be counted here, in the calendar's zone.
		r := d.reject(CodeInvalidRequest, "invalid command")
		r.Details = []FieldError{{Field: "recurrence", Message: fmt.Sprintf("must make from 1 to %d occurrences", MaxOccurrences)}}
		return r, nil
	}
	// The request id made something before (its record expired) when a
	// booking has the series' id or an occurrence's.
	seriesID := BookingID(cal.ID, d.Cmd.RequestID)
	ids := make([]string, len(occ))
	for i := range occ {
		ids[i] = BookingID(cal.ID, data.OccurrenceRequestID(d.Cmd.RequestID, i))
	}
	for _, id := range append([]string{seriesID}, ids...) {
		if tx.BookingExists(cal.ID, id) {
			return d.reject(CodeIdempotencyKeyReused, "this request id (idempotency key) was already used: its record has expired, what it made remains"), nil
		}
	}
	skip := spec.OnConflict == OnConflictSkip
	out := make([]Occurrence, len(occ))
	booked := make([]data.Interval, 0, len(occ))
	firstRefused := -1
	var firstVerdict verdict
	for i, iv := range occ {
		o := Occurrence{Index: i, Start: iv.Start, End: iv.End}
		if v := decideIntervalAmong(tx, &cal, loc, iv, d.At, "", booked); v.code != "" {
			o.Code, o.Conflict = v.code, v.conflict
			if !skip {
				o.Status = OccurrenceRefused
				r := d.refuse(v)
				r.Message = fmt.Sprintf("occurrence %d of the series (%s): %s", i, iv.Start.Format(time.RFC3339), v.msg)
				r.Occurrences = []Occurrence{o}
				return r, nil
			}
			o.Status = OccurrenceSkipped
			if firstRefused < 0 {
				firstRefused, firstVerdict = i, v
			}
		} else {
			o.Status, o.BookingID = status, ids[i]
			booked = append(booked, iv)
		}
		out[i] = o
	}
	if len(booked) == 0 {
		r := d.refuse(firstVerdict)
		r.Message = fmt.Sprintf("no occurrence of the series is free; the first (%s): %s", occ[firstRefused].Start.Format(time.RFC3339), firstVerdict.msg)
		r.Occurrences = out
		return r, nil
	}
	var first *data.Booking
	for i := range out {
		if out[i].BookingID == "" {
			continue
		}
		bk := newBooking(d, ids[i], &cal, status)
		bk.Start, bk.End, bk.ExpiresAt = occ[i].Start, occ[i].End, expires
		bk.SeriesID, bk.Series = seriesID, &data.SeriesRef{RequestID: d.Cmd.RequestID, Index: i, Count: len(occ)}
		if err := tx.CreateBooking(bk, nil); err != nil {
			return Reply{}, err
		}
		if err := checkTaken(tx, d.partition, d, &cal, &bk); err != nil {
			return Reply{}, err
		}
		if !hold { // a hold is mirrored once confirmed
			if err := mirrorSub(tx, d, cal.Link, data.SyncCreate, &bk, uint32(i+1)); err != nil {
				return Reply{}, err
			}
		}
		if first == nil {
			first = &bk
		}
	}
	r := d.accept()
	r.Booking, r.Occurrences = first, out
	return r, nil
}

// cancelFollowing decides a booking.cancel with scope following: the named
// occurrence and every later one of its series (by index, so an occurrence
// moved by a reschedule keeps its place) are cancelled; occurrences that
// were skipped have no booking and are left out of the reply.
func cancelFollowing(tx *data.Tx, d *Decoded) (Reply, error) {
	cal, err := tx.Calendar(d.Cmd.CalendarID)
	if errors.Is(err, data.ErrNotFound) {
		return d.reject(CodeCalendarNotFound, "calendar not found"), nil
	} else if err != nil {
		return Reply{}, err
	}
	bk, err := tx.Booking(d.Cmd.CalendarID, d.Cmd.BookingID)
	if errors.Is(err, data.ErrNotFound) || (err == nil && bk.Status != data.StatusConfirmed && bk.Status != data.StatusCancelled) {
		return d.reject(CodeBookingNotFound, "booking not found"), nil
	} else if err != nil {
		return Reply{}, err
	}
	if bk.Series == nil {
		r := d.reject(CodeInvalidRequest, "invalid command")
		r.Details = []FieldError{{Field: "scope", Message: "the booking is not an occurrence of a series"}}
		return r, nil
	}
	ref := *bk.Series
	var out []Occurrence
	var named data.Booking
	for j := ref.Index; j < ref.Count; j++ {
		id := BookingID(d.Cmd.CalendarID, data.OccurrenceRequestID(ref.RequestID, j))
		o, err := tx.Booking(d.Cmd.CalendarID, id)
		if errors.Is(err, data.ErrNotFound) {
			continue
		} else if err != nil {
			return Reply{}, err
		}
		if o.Status == data.StatusConfirmed {
			at := d.At
			o.Status, o.CancelledAt = data.StatusCancelled, &at
			if err := tx.PutBooking(o); err != nil {
				return Reply{}, err
			}
			if err := mirrorSub(tx, d, cal.Link, data.SyncDelete, &o, uint32(j+1)); err != nil {
				return Reply{}, err
			}
		}
		if j == ref.Index {
			named = o
		}
		out = append(out, Occurrence{Index: j, Start: o.Start, End: o.End, Status: o.Status, BookingID: o.ID})
	}
	r := d.accept()
	r.Booking, r.Occurrences = &named, out
	return r, nil
}

// settleHeldSeries decides a hold.confirm (confirm) or hold.release naming
// a held occurrence of a series: it acts on every occurrence of the
// series together, so held occurrences become bookings all at once or not
// at all, as a series does. The whole series is judged before anything is
// written: one expired occurrence (they share their expiry) refuses a
// confirm, a confirmed one refuses a release, as for a hold on its own.
func settleHeldSeries(tx *data.Tx, d *Decoded, named *data.Booking, confirm bool) (Reply, error) {
	cal, err := tx.Calendar(d.Cmd.CalendarID)
	if err != nil {
		return Reply{}, err
	}
	ref := *named.Series
	var occ []data.Booking
	for j := range ref.Count {
		o, err := tx.Booking(cal.ID, BookingID(cal.ID, data.OccurrenceRequestID(ref.RequestID, j)))
		if errors.Is(err, data.ErrNotFound) {
			continue // skipped when the series was held
		} else if err != nil {
			return Reply{}, err
		}
		if err := expireIfDue(tx, &o, d.At); err != nil {
			return Reply{}, err
		}
		occ = append(occ, o)
	}
	for _, o := range occ {
		switch {
		case confirm && o.Status == data.StatusExpired:
			return d.reject(CodeHoldExpired, "the series' holds expired; their intervals were released"), nil
		case confirm && o.Status == data.StatusReleased:
			return d.reject(CodeHoldNotFound, "the series' holds were released"), nil
		case !confirm && (o.Status == data.StatusConfirmed || o.Status == data.StatusCancelled):
			return d.reject(CodeHoldConfirmed, "the series' holds were confirmed: cancel the bookings instead"), nil
		}
	}
	r := d.accept()
	for i := range occ {
		o := &occ[i]
		if o.Status == data.StatusHeld {
			if confirm {
				o.Status = data.StatusConfirmed
			} else {
				o.Status = data.StatusReleased
			}
			if err := tx.PutBooking(*o); err != nil {
				return Reply{}, err
			}
			if confirm {
				if err := mirrorSub(tx, d, cal.Link, data.SyncCreate, o, uint32(o.Series.Index+1)); err != nil {
					return Reply{}, err
				}
			}
		}
		if o.ID == named.ID {
			r.Booking = o
		}
		r.Occurrences = append(r.Occurrences, Occurrence{Index: o.Series.Index, Start: o.Start, End: o.End, Status: o.Status, BookingID: o.ID})
	}
	return r, nil
}
