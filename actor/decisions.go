package actor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/data"
)

// The decision of each command type, called by decide in the writer's
// transaction.

func upsertCalendar(tx *data.Tx, d *Decoded) (Reply, error) {
	spec := d.Cmd.Calendar
	c, err := tx.Calendar(d.Cmd.CalendarID)
	created := errors.Is(err, data.ErrNotFound)
	if err != nil && !created {
		return Reply{}, err
	}
	if created {
		c = data.Calendar{ID: d.Cmd.CalendarID, CreatedAt: d.At}
	}
	// Rules apply to decisions from now on; existing bookings stay.
	c.Name, c.Timezone, c.Rules, c.UpdatedAt = spec.Name, spec.Timezone, spec.Rules, d.At
	old := c.Link
	c.Link = spec.Link
	if err := tx.PutCalendar(c); err != nil {
		return Reply{}, err
	}
	if err := backfill(tx, d, old, c.Link); err != nil {
		return Reply{}, err
	}
	r := d.accept()
	r.Created, r.Calendar = created, &c
	return r, nil
}

// calendarFor loads the command's calendar and its time zone; rej is set
// when the calendar does not exist.
func calendarFor(tx *data.Tx, d *Decoded) (cal data.Calendar, loc *time.Location, rej *Reply, err error) {
	cal, err = tx.Calendar(d.Cmd.CalendarID)
	if errors.Is(err, data.ErrNotFound) {
		r := d.reject(CodeCalendarNotFound, "calendar not found")
		return cal, nil, &r, nil
	} else if err != nil {
		return cal, nil, nil, err
	}
	loc, err = location(cal.Timezone)
	return cal, loc, nil, err
}

// refuse turns a refusing verdict of decideInterval into a rejection reply.
func (d *Decoded) refuse(v verdict) Reply {
	r := d.reject(v.code, v.msg)
	r.Conflict = v.conflict
	return r
}

// newBooking builds the record a booking.create or hold.create makes.
func newBooking(d *Decoded, id string, cal *data.Calendar, status string) data.Booking {
	spec := d.Cmd.Booking
	return data.Booking{
		ID:           id,
		CalendarID:   d.Cmd.CalendarID,
		Start:        spec.Start,
		End:          spec.End,
		Customer:     spec.Customer,
		Status:       status,
		CreatedAt:    d.At,
		Metadata:     spec.Metadata,
		BufferBefore: time.Duration(cal.BufferBeforeMinutes) * time.Minute,
		BufferAfter:  time.Duration(cal.BufferAfterMinutes) * time.Minute,
	}
}

// bookable decides whether d, a booking.create, may be booked at d.At: rej
// is its refusal (no calendar, a rule, a conflict) or nil. It only reads, so
// Refused answers from it too (and from holdable for a hold.create).
func bookable(tx *data.Tx, d *Decoded) (cal data.Calendar, rej *Reply, err error) {
	cal, loc, rej, err := calendarFor(tx, d)
	if rej != nil || err != nil {
		return cal, rej, err
	}
	spec := d.Cmd.Booking
	if v := decideInterval(tx, &cal, loc, data.Interval{Start: spec.Start, End: spec.End}, d.At, ""); v.code != "" {
		r := d.refuse(v)
		return cal, &r, nil
	}
	return cal, nil, nil
}

// madeBefore refuses a create whose booking id (derived from the request
// id) exists: its request record expired, and deciding it again would
// overwrite the booking that request made.
func madeBefore(tx *data.Tx, d *Decoded, id string) *Reply {
	if !tx.BookingExists(d.Cmd.CalendarID, id) {
		return nil
	}
	r := d.reject(CodeIdempotencyKeyReused, "this request id (idempotency key) was already used: its record has expired, the booking it made remains")
	return &r
}

func createBooking(tx *data.Tx, d *Decoded) (Reply, error) {
	id := BookingID(d.Cmd.CalendarID, d.Cmd.RequestID)
	if rej := madeBefore(tx, d, id); rej != nil {
		return *rej, nil
	}
	cal, rej, err := bookable(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	bk := newBooking(d, id, &cal, data.StatusConfirmed)
	if err := tx.CreateBooking(bk, d.creation()); err != nil {
		return Reply{}, err
	}
	if err := checkTaken(tx, d.partition, d, &cal, &bk); err != nil {
		return Reply{}, err
	}
	if err := mirror(tx, d, cal.Link, data.SyncCreate, &bk); err != nil {
		return Reply{}, err
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

// holdable is bookable for a hold.create: the calendar and the hold's ttl,
// or its refusal (also a ttl over the calendar's maximum).
func holdable(tx *data.Tx, d *Decoded) (cal data.Calendar, ttl time.Duration, rej *Reply, err error) {
	cal, loc, rej, err := calendarFor(tx, d)
	if rej != nil || err != nil {
		return cal, 0, rej, err
	}
	spec := d.Cmd.Booking
	if ttl, rej = holdTTL(d, &cal); rej != nil {
		return cal, 0, rej, nil
	}
	if v := decideInterval(tx, &cal, loc, data.Interval{Start: spec.Start, End: spec.End}, d.At, ""); v.code != "" {
		r := d.refuse(v)
		return cal, 0, &r, nil
	}
	return cal, ttl, nil, nil
}

// holdTTL is the lifetime of the hold d asks for on cal, or its refusal
// when it is over the calendar's maximum.
func holdTTL(d *Decoded, cal *data.Calendar) (time.Duration, *Reply) {
	ttl := DefaultHoldTTL
	if s := d.Cmd.Booking.TTLSeconds; s > 0 {
		ttl = time.Duration(s) * time.Second
	}
	maxTTL := DefaultMaxHoldTTL
	if cal.MaxHoldTTLSeconds > 0 {
		maxTTL = time.Duration(cal.MaxHoldTTLSeconds) * time.Second
	}
	if ttl > maxTTL {
		r := d.reject(CodeInvalidRequest, "invalid command")
		r.Details = []FieldError{{Field: "ttl", Message: fmt.Sprintf("must be at most %s for this calendar", maxTTL)}}
		return 0, &r
	}
	return ttl, nil
}

func createHold(tx *data.Tx, d *Decoded) (Reply, error) {
	id := BookingID(d.Cmd.CalendarID, d.Cmd.RequestID)
	if rej := madeBefore(tx, d, id); rej != nil {
		return *rej, nil
	}
	cal, ttl, rej, err := holdable(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	bk := newBooking(d, id, &cal, data.StatusHeld)
	exp := d.At.Add(ttl)
	bk.ExpiresAt = &exp
	if err := tx.CreateBooking(bk, d.creation()); err != nil {
		return Reply{}, err
	}
	if err := checkTaken(tx, d.partition, d, &cal, &bk); err != nil {
		return Reply{}, err
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

func deref(r *Reply) Reply {
	if r == nil {
		return Reply{}
	}
	return *r
}

// expireIfDue records the expiry of a hold whose time has passed.
func expireIfDue(tx *data.Tx, bk *data.Booking, now time.Time) error {
	if bk.Status != data.StatusHeld || bk.ExpiresAt == nil || now.Before(*bk.ExpiresAt) {
		return nil
	}
	bk.Status = data.StatusExpired
	return tx.PutBooking(*bk)
}

// holdFor loads the hold the command names, expiring it first if its time
// has passed.
func holdFor(tx *data.Tx, d *Decoded) (bk data.Booking, rej *Reply, err error) {
	if !tx.CalendarExists(d.Cmd.CalendarID) {
		r := d.reject(CodeCalendarNotFound, "calendar not found")
		return bk, &r, nil
	}
	bk, err = tx.Booking(d.Cmd.CalendarID, d.Cmd.BookingID)
	if errors.Is(err, data.ErrNotFound) || (err == nil && bk.ExpiresAt == nil) {
		r := d.reject(CodeHoldNotFound, "hold not found")
		return bk, &r, nil
	} else if err != nil {
		return bk, nil, err
	}
	if rej := d.collectiveRefusal(&bk); rej != nil {
		return bk, rej, nil
	}
	return bk, nil, expireIfDue(tx, &bk, d.At)
}

func confirmHold(tx *data.Tx, d *Decoded) (Reply, error) {
	bk, rej, err := holdFor(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	if bk.Series != nil {
		return settleHeldSeries(tx, d, &bk, true)
	}
	switch bk.Status {
	case data.StatusHeld:
		bk.Status = data.StatusConfirmed
		if err := tx.PutBooking(bk); err != nil {
			return Reply{}, err
		}
		if err := mirrorLinked(tx, d, data.SyncCreate, &bk); err != nil {
			return Reply{}, err
		}
	case data.StatusConfirmed, data.StatusCancelled:
		// Confirmed before (by another request id): the booking as it is.
	case data.StatusExpired:
		return d.reject(CodeHoldExpired, "the hold expired; its interval was released"), nil
	default: // released
		return d.reject(CodeHoldNotFound, "the hold was released"), nil
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

func releaseHold(tx *data.Tx, d *Decoded) (Reply, error) {
	bk, rej, err := holdFor(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	if bk.Series != nil {
		return settleHeldSeries(tx, d, &bk, false)
	}
	switch bk.Status {
	case data.StatusHeld:
		bk.Status = data.StatusReleased
		if err := tx.PutBooking(bk); err != nil {
			return Reply{}, err
		}
	case data.StatusConfirmed, data.StatusCancelled:
		return d.reject(CodeHoldConfirmed, "the hold was confirmed: cancel the booking instead"), nil
	}
	// released or expired: releasing again changes nothing.
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

// ExpireRequestID is the request id of the hold.expire command the node's
// hold expirer publishes for a calendar's holds due at exp:
// expire-at.<exp in Unix nanoseconds>.
//
// Earlier builds published expire.<ns>, and recorded such a command even
// when it was stored before that instant. Commands with that id are still
// decided that way, so that the logs they are in replay to the same index;
// only the expire-at. form is left unrecorded when early (expireHolds).
func ExpireRequestID(exp time.Time) string {
	return expirePrefix + strconv.FormatInt(exp.UnixNano(), 10)
}

const expirePrefix = "expire-at."

// ExpireTarget is the expiry an ExpireRequestID names.
func ExpireTarget(reqID string) (time.Time, bool) {
	ns, ok := strings.CutPrefix(reqID, expirePrefix)
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n).UTC(), true
}

// expireHolds records the expiry of every hold of the calendar whose time
// has passed at the command's log time. The command is published by the
// node's hold expirer, so intervals free up even when nothing else
// arrives; decisions never depended on it (an expired hold stops counting
// at its expiry time anyway).
//
// The expirer decides that a hold is due by its own clock, which can be
// ahead of the stream leader's that stamps the log time. A command whose
// request id names an expiry after its log time (early) expires what is
// due at its log time like any other, but is not recorded: its request id
// must still be able to expire that hold once it is due, and the expirer
// publishes it again (see queue/holds.go). The decision depends only on the
// log time and the request id, so replay agrees.
func expireHolds(tx *data.Tx, d *Decoded) (r Reply, early bool, err error) {
	if !tx.CalendarExists(d.Cmd.CalendarID) {
		return d.reject(CodeCalendarNotFound, "calendar not found"), false, nil
	}
	target, named := ExpireTarget(d.Cmd.RequestID)
	early = named && d.At.Before(target)
	n := 0
	for _, h := range tx.DueHolds(d.At, 1<<30) {
		if h.Calendar != d.Cmd.CalendarID {
			continue
		}
		bk, err := tx.Booking(h.Calendar, h.ID)
		if errors.Is(err, data.ErrNotFound) || (err == nil && bk.Status != data.StatusHeld) {
			// A stale index entry (its calendar was rebuilt): drop it.
			if err := tx.DropDueHold(h); err != nil {
				return Reply{}, false, err
			}
			continue
		} else if err != nil {
			return Reply{}, false, err
		}
		if err := expireIfDue(tx, &bk, d.At); err != nil {
			return Reply{}, false, err
		}
		n++
	}
	r = d.accept()
	r.Message = fmt.Sprintf("%d holds expired", n)
	if early {
		r.Message += fmt.Sprintf("; the expiry this request names (%s) is after the command's log time: not recorded",
			target.Format(time.RFC3339Nano))
	}
	return r, early, nil
}

func rescheduleBooking(tx *data.Tx, d *Decoded) (Reply, error) {
	cal, loc, rej, err := calendarFor(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	bk, err := tx.Booking(d.Cmd.CalendarID, d.Cmd.BookingID)
	if errors.Is(err, data.ErrNotFound) || (err == nil && bk.Status != data.StatusConfirmed && bk.Status != data.StatusCancelled) {
		return d.reject(CodeBookingNotFound, "booking not found"), nil
	} else if err != nil {
		return Reply{}, err
	}
	if bk.Status != data.StatusConfirmed {
		return d.reject(CodeBookingNotConfirmed, "only a confirmed booking can be rescheduled"), nil
	}
	if rej := d.collectiveRefusal(&bk); rej != nil {
		return *rej, nil
	}
	iv := data.Interval{Start: d.Cmd.Reschedule.Start, End: d.Cmd.Reschedule.End}
	// Checked without the booking itself: moving into its own old interval
	// is fine. If refused, nothing is written: the old interval stays.
	if v := decideInterval(tx, &cal, loc, iv, d.At, bk.ID); v.code != "" {
		return d.refuse(v), nil
	}
	bk.Start, bk.End = iv.Start, iv.End
	bk.BufferBefore = time.Duration(cal.BufferBeforeMinutes) * time.Minute
	bk.BufferAfter = time.Duration(cal.BufferAfterMinutes) * time.Minute
	if err := tx.PutBooking(bk); err != nil {
		return Reply{}, err
	}
	if err := checkTaken(tx, d.partition, d, &cal, &bk); err != nil {
		return Reply{}, err
	}
	if err := mirror(tx, d, cal.Link, data.SyncUpdate, &bk); err != nil {
		return Reply{}, err
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

func cancelBooking(tx *data.Tx, d *Decoded) (Reply, error) {
	if !tx.CalendarExists(d.Cmd.CalendarID) {
		return d.reject(CodeCalendarNotFound, "calendar not found"), nil
	}
	bk, err := tx.Booking(d.Cmd.CalendarID, d.Cmd.BookingID)
	if errors.Is(err, data.ErrNotFound) || (err == nil && bk.Status != data.StatusConfirmed && bk.Status != data.StatusCancelled) {
		return d.reject(CodeBookingNotFound, "booking not found"), nil
	} else if err != nil {
		return Reply{}, err
	}
	if rej := d.collectiveRefusal(&bk); rej != nil {
		return *rej, nil
	}
	if bk.Status != data.StatusCancelled {
		if err := cancelRecord(tx, d, &bk); err != nil {
			return Reply{}, err
		}
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

// cancelRecord cancels bk, a confirmed booking of d's calendar, at d's log
// time, and removes it from a linked calendar.
func cancelRecord(tx *data.Tx, d *Decoded, bk *data.Booking) error {
	at := d.At
	bk.Status, bk.CancelledAt = data.StatusCancelled, &at
	if err := tx.PutBooking(*bk); err != nil {
		return err
	}
	return mirrorLinked(tx, d, data.SyncDelete, bk)
}

// location loads a time zone from the data built into the binary, never
// the host's (see package zones).
func location(name string) (*time.Location, error) { return zones.Load(name) }
