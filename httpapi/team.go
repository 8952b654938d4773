package httpapi

import (
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// The collective booking page: /book/team/{a,b,...}?key=..., whose visitors
// book one interval on every calendar listed (a doctor and a room). It is
// the component of the calendar page with calendars="a,b,...", reading the
// calendars' common page profile (GET /v1/page?calendar_ids=...) and their
// common availability (GET /v1/availability?calendar_ids=...), holding
// through POST /v1/holds and confirming or releasing through the hold
// routes of the calendar that answers the hold (the first in id order).
//
// The ids are in the path, not in a query, so that /book/team stays the
// page of a calendar called "team".

var errNoTeamPage = &Error{Code: CodeNotFound, Message: "no booking page for these calendars: open /book/team/{calendarId},{calendarId}...?key=<a publishable key listing every one>"}

// bookTeamPage serves /book/team/{calendarIds}: served only when key is a
// publishable key listing every calendar, as every route the page calls
// requires (on an API without keys every set of calendars has a page, as
// every calendar has one).
func (s *Server) bookTeamPage(c *fiber.Ctx) error {
	ids, err := splitCalendarIDs(c.Params("calendarIds"), "calendarIds")
	if err != nil {
		return err
	}
	key := c.Query("key")
	if !s.keys.Open() {
		p, ok := s.keys.lookup(key)
		if !ok || p.Role != RolePublishable {
			return errNoTeamPage
		}
		for _, cal := range ids {
			if !p.mayUseCalendar(cal) {
				return errNoTeamPage
			}
		}
	}
	return s.sendPage(c, pageData{CalendarIDs: strings.Join(ids, ","), Key: key})
}

// teamPageResponse is what a collective booking page shows of its
// calendars: their page profiles (calendarPageResponse) folded into one, so
// that every start and duration it offers is one each calendar would take.
type teamPageResponse struct {
	// CalendarIDs are the calendars, in the order asked.
	CalendarIDs []string `json:"calendar_ids"`
	// Calendars name them, in that order, each with the grid of its own
	// starts: the common availability's budget counts every calendar's
	// starts on its own grid, so a page sizes its queries by these.
	Calendars []teamPageCalendar `json:"calendars"`
	// Timezone is the first calendar's.
	Timezone string `json:"timezone"`
	// DurationsMinutes are the durations every calendar accepts, among
	// those some calendar offers, the first calendar's first; empty when
	// they have none in common.
	DurationsMinutes []int `json:"durations_minutes"`
	// StepMinutes is the coarsest grid: a common start is on every grid.
	StepMinutes int `json:"step_minutes"`
	// HorizonDays is the nearest horizon, absent when no calendar has
	// one: a common start is within every calendar's.
	HorizonDays int `json:"horizon_days,omitempty"`
	// MaxHoldTTLSeconds is the shortest, as a collective hold's ttl is
	// within every calendar's limit.
	MaxHoldTTLSeconds int `json:"max_hold_ttl_seconds"`
}

type teamPageCalendar struct {
	CalendarID  string `json:"calendar_id"`
	Name        string `json:"name"`
	StepMinutes int    `json:"step_minutes"`
}

// teamPage serves GET /v1/page?calendar_ids=a,b (the <bookline-booking
// calendars="..."> component's first read): open to the keys that may use
// every calendar, which may read each calendar's page anyway.
func (s *Server) teamPage(c *fiber.Ctx) error {
	ids, err := parseCalendarIDs(c)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := s.syncRead(c, id); err != nil {
			return err
		}
	}
	out := teamPageResponse{CalendarIDs: ids, Calendars: []teamPageCalendar{}, DurationsMinutes: []int{}}
	err = s.backend.View(func(tx *data.Tx) error {
		rules := make([]data.Rules, len(ids))
		var offered []int
		for i, id := range ids {
			cal, err := tx.Calendar(id)
			if err != nil {
				return calendarErr(id, err)
			}
			rules[i] = cal.Rules
			info := pageInfo(&cal)
			out.Calendars = append(out.Calendars, teamPageCalendar{CalendarID: id, Name: info.Name, StepMinutes: info.StepMinutes})
			for _, d := range info.DurationsMinutes {
				if !slices.Contains(offered, d) {
					offered = append(offered, d)
				}
			}
			if i == 0 {
				out.Timezone, out.MaxHoldTTLSeconds = info.Timezone, info.MaxHoldTTLSeconds
			}
			out.StepMinutes = max(out.StepMinutes, info.StepMinutes)
			out.MaxHoldTTLSeconds = min(out.MaxHoldTTLSeconds, info.MaxHoldTTLSeconds)
			if info.HorizonDays > 0 && (out.HorizonDays == 0 || info.HorizonDays < out.HorizonDays) {
				out.HorizonDays = info.HorizonDays
			}
		}
		// A calendar offers one duration when it accepts a range: another
		// calendar's may be in that range too.
		for _, d := range offered {
			if !slices.ContainsFunc(rules, func(r data.Rules) bool { return !actor.DurationAllowed(&r, time.Duration(d)*time.Minute) }) {
				out.DurationsMinutes = append(out.DurationsMinutes, d)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.JSON(out)
}
