package httpapi

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

func (s *Server) getCalendar(c *fiber.Ctx) error {
	out, err := s.readCalendar(c)
	if err != nil {
		return err
	}
	return s.writeCalendar(c, out)
}

// readCalendar reads the route's calendar, synced first in cluster mode.
func (s *Server) readCalendar(c *fiber.Ctx) (data.Calendar, error) {
	var out data.Calendar
	cal, err := calendarID(c)
	if err != nil {
		return out, err
	}
	if err := s.syncRead(c, cal); err != nil {
		return out, err
	}
	err = s.backend.View(func(tx *data.Tx) error {
		out, err = tx.Calendar(cal)
		return err
	})
	if errors.Is(err, data.ErrNotFound) {
		return out, &Error{Code: actor.CodeCalendarNotFound, Message: "calendar not found"}
	}
	return out, err
}

func (s *Server) getBooking(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	id := c.Params("bookingId")
	notFound := &Error{Code: actor.CodeBookingNotFound, Message: "booking not found"}
	if !actor.ValidBookingID(id) {
		return notFound
	}
	if err := s.syncRead(c, cal); err != nil {
		return err
	}
	var out data.Booking
	err = s.backend.View(func(tx *data.Tx) error {
		out, err = tx.Booking(cal, id)
		return err
	})
	if errors.Is(err, data.ErrNotFound) {
		return notFound
	} else if err != nil {
		return err
	}
	return c.JSON(out)
}

type listResponse struct {
	Bookings   []data.Booking `json:"bookings"`
	NextCursor *string        `json:"next_cursor"`
}

var (
	listMin = time.Date(actor.MinYear, 1, 1, 0, 0, 0, 0, time.UTC)
	listMax = time.Date(actor.MaxYear+1, 1, 1, 0, 0, 0, 0, time.UTC)
)

func (s *Server) listBookings(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	from, to, limit := listMin, listMax, DefaultListLimit
	var bad []actor.FieldError
	if v := c.Query("from"); v != "" {
		if t, fe := parseTime("from", v); fe != nil {
			bad = append(bad, *fe)
		} else {
			from = t
		}
	}
	if v := c.Query("to"); v != "" {
		if t, fe := parseTime("to", v); fe != nil {
			bad = append(bad, *fe)
		} else {
			to = t
		}
	}
	if len(bad) == 0 && !to.After(from) {
		bad = append(bad, actor.FieldError{Field: "to", Message: "must be after from"})
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > s.cfg.MaxListLimit {
			bad = append(bad, actor.FieldError{Field: "limit", Message: fmt.Sprintf("must be an integer from 1 to %d", s.cfg.MaxListLimit)})
		}
		limit = n
	}
	var after data.Cursor
	if v := c.Query("cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(b) < 9 {
			bad = append(bad, actor.FieldError{Field: "cursor", Message: "is not a cursor returned by this API"})
		}
		after = b
	}
	if len(bad) > 0 {
		return invalid(bad...)
	}
	// The range bound applies to an explicit range: with a bound omitted the
	// list is open-ended, and the page size bounds the work instead.
	if s.cfg.MaxListRange > 0 && c.Query("from") != "" && c.Query("to") != "" && to.Sub(from) > s.cfg.MaxListRange {
		return &Error{Code: CodeRangeTooLarge, Message: fmt.Sprintf("from and to may be at most %s apart", fmtRange(s.cfg.MaxListRange)),
			Details: []actor.FieldError{{Field: "to", Message: fmt.Sprintf("must be at most %s after from", fmtRange(s.cfg.MaxListRange))}}}
	}
	if err := s.charge(c, costOf(limit, ListBookingsPerToken)); err != nil {
		return err
	}
	if err := s.syncRead(c, cal); err != nil {
		return err
	}
	var resp listResponse
	err = s.backend.View(func(tx *data.Tx) error {
		if _, err := tx.Calendar(cal); err != nil {
			return err
		}
		bks, next, err := tx.ListBookings(cal, from, to, limit, after)
		resp.Bookings = bks
		if next != nil {
			cur := base64.RawURLEncoding.EncodeToString(next)
			resp.NextCursor = &cur
		}
		return err
	})
	if errors.Is(err, data.ErrNotFound) {
		return &Error{Code: actor.CodeCalendarNotFound, Message: "calendar not found"}
	} else if err != nil {
		return err
	}
	if resp.Bookings == nil {
		resp.Bookings = []data.Booking{}
	}
	return c.JSON(resp)
}
