package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Routes of calendar rules: availability, holds and reschedule.

type availabilityResponse struct {
	CalendarID string                `json:"calendar_id"`
	Timezone   string                `json:"timezone"`
	Duration   string                `json:"duration"`
	Slots      []actor.BookableStart `json:"slots"`
}

// availabilityQuery is the parameters of an availability query.
type availabilityQuery struct {
	from, to       time.Time
	duration, step time.Duration
}

// parseAvailabilityQuery reads from, to, duration and step, as every
// availability route takes them.
func parseAvailabilityQuery(c *fiber.Ctx) (q availabilityQuery, err error) {
	var bad []actor.FieldError
	var fe *actor.FieldError
	if q.from, fe = parseTime("from", c.Query("from")); fe != nil {
		bad = append(bad, *fe)
	}
	if q.to, fe = parseTime("to", c.Query("to")); fe != nil {
		bad = append(bad, *fe)
	}
	q.duration, err = time.ParseDuration(c.Query("duration"))
	if d := q.duration; err != nil || d <= 0 || d > actor.MaxBookingDuration || d%time.Minute != 0 {
		bad = append(bad, actor.FieldError{Field: "duration", Message: "must be a whole number of minutes up to 168h, e.g. 30m or 1h30m"})
	}
	if v := c.Query("step"); v != "" {
		q.step, err = time.ParseDuration(v)
		if err != nil || q.step < time.Minute || q.step > 24*time.Hour || q.step%time.Minute != 0 {
			bad = append(bad, actor.FieldError{Field: "step", Message: "must be whole minutes from 1m to 24h"})
		}
	}
	if len(bad) == 0 {
		switch {
		case !q.to.After(q.from):
			bad = append(bad, actor.FieldError{Field: "to", Message: "must be after from"})
		case q.to.Sub(q.from) > actor.MaxAvailabilityRange:
			bad = append(bad, actor.FieldError{Field: "to", Message: "the range may span at most 62 days"})
		}
	}
	if len(bad) > 0 {
		return q, invalid(bad...)
	}
	return q, nil
}

// availability lists the bookable starts of a duration in [from, to), as
// the writer would decide them right now.
func (s *Server) availability(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	q, err := parseAvailabilityQuery(c)
	if err != nil {
		return err
	}
	from, to, d, step := q.from, q.to, q.duration, q.step
	if err := s.syncRead(c, cal); err != nil {
		return err
	}
	// The work is bounded, and paid for, before it starts.
	var calendar data.Calendar
	err = s.backend.View(func(tx *data.Tx) (err error) {
		calendar, err = tx.Calendar(cal)
		return err
	})
	if errors.Is(err, data.ErrNotFound) {
		return &Error{Code: actor.CodeCalendarNotFound, Message: "calendar not found"}
	} else if err != nil {
		return err
	}
	grid := actor.AvailabilityStep(&calendar, step)
	n := actor.AvailabilityCandidates(from, to, grid)
	if n > actor.MaxAvailabilityCandidates {
		return tooManyStarts(n, grid, calendar.SlotStepMinutes > 0)
	}
	if err := s.charge(c, availabilityCost(n)); err != nil {
		return err
	}
	release, err := s.startSweep()
	if err != nil {
		return err
	}
	defer release()
	var resp availabilityResponse
	err = s.backend.View(func(tx *data.Tx) error {
		calendar, err := tx.Calendar(cal) // as this transaction sees it
		if err != nil {
			return err
		}
		slots, err := actor.Availability(tx, &calendar, from, to, d, step, time.Now())
		resp = availabilityResponse{CalendarID: cal, Timezone: calendar.Timezone, Duration: d.String(), Slots: slots}
		return err
	})
	switch {
	case errors.Is(err, data.ErrNotFound):
		return &Error{Code: actor.CodeCalendarNotFound, Message: "calendar not found"}
	case errors.Is(err, actor.ErrTooManyCandidates): // its step changed meanwhile
		return tooManyStarts(actor.MaxAvailabilityCandidates+1, grid, true)
	case err != nil:
		return err
	}
	return c.JSON(resp)
}

type holdRequest struct {
	bookingRequest
	// TTL is a duration ("5m") or a number of seconds; default 5 minutes.
	TTL json.RawMessage `json:"ttl"`
}

// holdSpec is bookingSpec for a hold's body: the booking with its ttl.
func holdSpec(req *holdRequest) (*actor.BookingSpec, []actor.FieldError) {
	spec, bad := bookingSpec(&req.bookingRequest)
	ttl, fe := parseTTL(req.TTL)
	if fe != nil {
		bad = append(bad, *fe)
	}
	spec.TTLSeconds = ttl
	return spec, bad
}

func parseTTL(raw json.RawMessage) (int, *actor.FieldError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	bad := &actor.FieldError{Field: "ttl", Message: `must be a duration like "5m" or a number of seconds`}
	var secs float64
	if err := json.Unmarshal(raw, &secs); err == nil {
		if secs < 1 || secs != float64(int(secs)) {
			return 0, bad
		}
		return int(secs), nil
	}
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return 0, bad
	}
	d, err := time.ParseDuration(str)
	if err != nil || d < time.Second || d%time.Second != 0 {
		return 0, bad
	}
	return int(d / time.Second), nil
}

// bookingSpec parses the booking fields common to bookings and holds.
func bookingSpec(req *bookingRequest) (*actor.BookingSpec, []actor.FieldError) {
	spec := &actor.BookingSpec{Customer: req.Customer, Metadata: req.Metadata, Recurrence: req.Recurrence, OnConflict: req.OnConflict}
	var bad []actor.FieldError
	spec.Start, spec.End, bad = parseInterval(req.Start, req.End)
	if len(bad) > 0 {
		// Report the other fields too, but not "start is required" twice.
		for _, e := range actor.ValidateBooking(spec) {
			if e.Field != "start" && e.Field != "end" {
				bad = append(bad, e)
			}
		}
	}
	return spec, bad
}

func (s *Server) createHold(c *fiber.Ctx) error {
	var req holdRequest
	cal, reqID, err := writeRequest(c, &req)
	if err != nil {
		return err
	}
	spec, bad := holdSpec(&req)
	if len(bad) > 0 {
		return invalid(bad...)
	}
	// With a recurrence, a held series (version 3), which costs what the
	// series of bookings costs: its writer decides every occurrence, and
	// a publishable key may ask for one.
	cmd := &actor.Command{Type: actor.TypeHoldCreate, RequestID: reqID, CalendarID: cal, Booking: spec}
	cmd.V = cmd.MinVersion()
	if err := s.chargeSeries(c, spec); err != nil {
		return err
	}
	return s.submit(c, cmd)
}

var errHoldNotFound = &Error{Code: actor.CodeHoldNotFound, Message: "hold not found"}

type rescheduleRequest struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

func (s *Server) rescheduleBooking(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	id := c.Params("bookingId")
	if !actor.ValidBookingID(id) {
		return &Error{Code: actor.CodeBookingNotFound, Message: "booking not found"}
	}
	var req rescheduleRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	reqID, err := requestID(c)
	if err != nil {
		return err
	}
	iv := &actor.IntervalSpec{}
	var bad []actor.FieldError
	iv.Start, iv.End, bad = parseInterval(req.Start, req.End)
	if len(bad) > 0 {
		return invalid(bad...)
	}
	if ids := s.collectivePartOf(c, cal, id); ids != nil {
		return s.moveCollective(c, cal, id, reqID, ids, iv)
	}
	return s.submit(c, &actor.Command{V: actor.SchemaVersion, Type: actor.TypeBookingReschedule, RequestID: reqID, CalendarID: cal, BookingID: id, Reschedule: iv})
}

// parseInterval parses the start and end fields of a body.
func parseInterval(start, end string) (s, e time.Time, bad []actor.FieldError) {
	parse := func(field, v string) time.Time {
		t, fe := parseTime(field, v)
		switch {
		case fe != nil:
			bad = append(bad, *fe)
		case t.Year() < actor.MinYear || t.Year() > actor.MaxYear:
			// Said here, where the time is known to be present: the
			// same words for start and end (year 0001 is also Go's
			// zero time, which the command cannot tell from none).
			bad = append(bad, actor.FieldError{Field: field, Message: actor.TimeRangeMessage})
		}
		return t
	}
	return parse("start", start), parse("end", end), bad
}

// createdStatus is the HTTP status of an accepted command of type typ.
func createdStatus(typ string) int {
	switch typ {
	case actor.TypeBookingCreate, actor.TypeHoldCreate:
		return http.StatusCreated
	}
	return http.StatusOK
}
