package httpapi

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// MaxAvailabilityCalendars bounds the calendars of one query of
// GET /v1/availability.
const MaxAvailabilityCalendars = 10

// allAvailabilityResponse answers GET /v1/availability: the starts at
// which every calendar is free, each with its local time on every
// calendar (their time zones may differ).
type allAvailabilityResponse struct {
	CalendarIDs []string     `json:"calendar_ids"`
	Duration    string       `json:"duration"`
	Slots       []commonSlot `json:"slots"`
}

type commonSlot struct {
	Start time.Time         `json:"start"`
	Local map[string]string `json:"local"`
}

// parseCalendarIDs reads the query's calendar_ids (splitCalendarIDs), each
// one a calendar the caller may use.
func parseCalendarIDs(c *fiber.Ctx) ([]string, error) {
	ids, err := splitCalendarIDs(c.Query("calendar_ids"), "calendar_ids")
	if err != nil {
		return nil, err
	}
	if p := principal(c); p != nil {
		for _, id := range ids {
			if !p.mayUseCalendar(id) {
				return nil, errForbidden
			}
		}
	}
	return ids, nil
}

// splitCalendarIDs reads list, 2 to MaxAvailabilityCalendars distinct
// calendar ids separated by commas, refusing it as the field named field.
func splitCalendarIDs(list, field string) ([]string, error) {
	ids := strings.Split(list, ",")
	bad := func(m string) error { return invalid(actor.FieldError{Field: field, Message: m}) }
	if len(ids) < 2 || len(ids) > MaxAvailabilityCalendars {
		return nil, bad(fmt.Sprintf("must list 2 to %d calendar ids, separated by commas", MaxAvailabilityCalendars))
	}
	for i, id := range ids {
		if !actor.ValidCalendarID(id) {
			return nil, bad(fmt.Sprintf("%q is not a calendar id ([A-Za-z0-9_-]{1,64})", id))
		}
		if slices.Contains(ids[:i], id) {
			return nil, bad(fmt.Sprintf("lists %q twice", id))
		}
	}
	return ids, nil
}

// availabilityAll lists the starts of a duration in [from, to) at which
// every calendar of calendar_ids is free: the intersection of what each
// calendar's writer would decide right now (actor.Availability, the check
// the writer itself makes). The parameters are a calendar's availability
// query's; its budget counts the candidate starts of every calendar.
func (s *Server) availabilityAll(c *fiber.Ctx) error {
	ids, err := parseCalendarIDs(c)
	if err != nil {
		return err
	}
	q, err := parseAvailabilityQuery(c)
	if err != nil {
		return err
	}
	resp := allAvailabilityResponse{CalendarIDs: ids, Duration: q.duration.String(), Slots: []commonSlot{}}
	free := map[int64]map[string]string{} // start -> calendar -> local time
	err = s.availabilityOf(c, ids, q, func(i int, id string, slots []actor.BookableStart) {
		next := map[int64]map[string]string{}
		for _, sl := range slots {
			k := sl.Start.UnixNano()
			if local, ok := free[k]; ok || i == 0 {
				if local == nil {
					local = map[string]string{}
				}
				local[id] = sl.Local
				next[k] = local
			}
		}
		free = next
	})
	if err != nil {
		return err
	}
	for k, local := range free {
		resp.Slots = append(resp.Slots, commonSlot{Start: time.Unix(0, k).UTC(), Local: local})
	}
	slices.SortFunc(resp.Slots, func(a, b commonSlot) int { return a.Start.Compare(b.Start) })
	return c.JSON(resp)
}

// availabilityOf runs q over every calendar of ids, in order, as each
// calendar's writer would decide it now (actor.Availability), in one read
// transaction, and hands each calendar's starts to fn. The calendars are
// first brought up to their logs (cluster mode), and the work is bounded
// and paid for before it starts: its budget counts the candidate starts of
// every calendar.
func (s *Server) availabilityOf(c *fiber.Ctx, ids []string, q availabilityQuery, fn func(i int, id string, slots []actor.BookableStart)) error {
	for _, id := range ids {
		if err := s.syncRead(c, id); err != nil {
			return err
		}
	}
	n, err := s.candidatesOf(ids, q)
	if err != nil {
		return err
	}
	if err := s.charge(c, availabilityCost(n)); err != nil {
		return err
	}
	release, err := s.startSweep()
	if err != nil {
		return err
	}
	defer release()
	err = s.backend.View(func(tx *data.Tx) error {
		for i, id := range ids {
			cal, err := tx.Calendar(id) // as this transaction sees it
			if err != nil {
				return calendarErr(id, err)
			}
			slots, err := actor.Availability(tx, &cal, q.from, q.to, q.duration, q.step, time.Now())
			if err != nil {
				return err
			}
			fn(i, id, slots)
		}
		return nil
	})
	if errors.Is(err, actor.ErrTooManyCandidates) { // a calendar's step changed meanwhile
		return &Error{Code: CodeRangeTooLarge, Message: "a calendar's grid changed during the query and from..to holds too many starts on it: shorten the range"}
	}
	return err
}

// candidatesOf is the candidate starts of q over every calendar of ids,
// or the refusal of a query over the budget or naming a missing calendar.
func (s *Server) candidatesOf(ids []string, q availabilityQuery) (int, error) {
	n := 0
	err := s.backend.View(func(tx *data.Tx) error {
		for _, id := range ids {
			cal, err := tx.Calendar(id)
			if err != nil {
				return calendarErr(id, err)
			}
			n += actor.AvailabilityCandidates(q.from, q.to, actor.AvailabilityStep(&cal, q.step))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if n > actor.MaxAvailabilityCandidates {
		return 0, &Error{Code: CodeRangeTooLarge,
			Message: fmt.Sprintf("from..to holds %d candidate starts over the %d calendars; at most %d in all: shorten the range or ask for a larger step",
				n, len(ids), actor.MaxAvailabilityCandidates),
			Details: []actor.FieldError{{Field: "to", Message: "shorten the range"}}}
	}
	return n, nil
}

// calendarErr is the answer to a calendar that cannot be read.
func calendarErr(id string, err error) error {
	if errors.Is(err, data.ErrNotFound) {
		return &Error{Code: actor.CodeCalendarNotFound, Message: fmt.Sprintf("calendar %s not found", id)}
	}
	return err
}
