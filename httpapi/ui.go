package httpapi

import (
	"bytes"
	"errors"
	"html/template"
	"regexp"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/httpapi/ui"
)

// The booking UI: the /book/{calendarId} page, the <bookline-booking>
// component it uses (/ui/bookline.js), and what the component reads of a
// calendar (GET /v1/calendars/{calendarId}/page).
//
// A page gets its key from its link: /book/{calendarId}?key=<publishable
// key>. The owner of a calendar makes it bookable from the web by
// configuring a publishable key that lists it and handing out that link
// (or embedding the component with key="..."): without such a key the page
// answers 404, so a calendar is never public by default. The key is in the
// page anyway (it is sent with every API call), so putting it in the link
// reveals nothing more; the page sends no Referer, so the link does not
// leak to other sites. On an API without keys (loopback only) every
// calendar has a page, as every local process may book anyway.
//
// A pool has a page too, /book/pool/{poolId}?key=...: the same component
// (pool="..."), reading the pool (GET /v1/pools/{poolId}/page and
// availability), holding through POST /v1/pools/{poolId}/holds and
// confirming through the chosen calendar's hold routes. Its key must list
// every calendar of the pool. Several calendars booked together have one,
// /book/team/{a,b,...}?key=... (team.go).

var pageTemplate = template.Must(template.New("page").Parse(ui.PageTemplate))

// pageDate is the optional ?date= of a page, the day it opens on.
var pageDate = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)

func (s *Server) uiRoutes() {
	s.app.Get("/ui/bookline.js", s.script)
	s.app.Get("/book/:calendarId", s.bookPage)
	s.app.Get("/book/pool/:poolId", s.bookPoolPage)
	s.app.Get("/book/team/:calendarIds", s.bookTeamPage)
}

// pageHeaders are sent with the page: the script is the page's only code,
// it talks only to bookline, and the page may be framed by other sites
// (that is embedding too).
func pageHeaders(c *fiber.Ctx) {
	c.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'")
	c.Set("Referrer-Policy", "no-referrer")
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderCacheControl, "no-store")
}

var errNoPage = &Error{Code: CodeNotFound, Message: "no booking page for this calendar: open /book/{calendarId}?key=<a publishable key listing it>"}

func (s *Server) bookPage(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	key := c.Query("key")
	if !s.keys.Open() {
		p, ok := s.keys.lookup(key)
		if !ok || p.Role != RolePublishable || !p.mayUseCalendar(cal) {
			return errNoPage
		}
	}
	return s.sendPage(c, pageData{CalendarID: cal, Key: key})
}

var errNoPoolPage = &Error{Code: CodeNotFound, Message: "no booking page for this pool: open /book/pool/{poolId}?key=<a publishable key listing every calendar of it>"}

// bookPoolPage serves /book/pool/{poolId}: the page of a pool, whose
// visitors book whichever calendar the pool chooses. Its key must be a
// publishable key listing every calendar of the pool, as every route the
// page calls requires; a pool without one has no page, as a calendar has
// none.
func (s *Server) bookPoolPage(c *fiber.Ctx) error {
	id, err := poolID(c)
	if err != nil {
		return err
	}
	key := c.Query("key")
	if !s.keys.Open() {
		k, ok := s.keys.lookup(key)
		if !ok || k.Role != RolePublishable {
			return errNoPoolPage
		}
		p, err := s.readPool(c, id)
		var e *Error
		if errors.As(err, &e) && e.Code == actor.CodePoolNotFound {
			return errNoPoolPage
		} else if err != nil {
			return err
		}
		for _, cal := range p.CalendarIDs {
			if !k.mayUseCalendar(cal) {
				return errNoPoolPage
			}
		}
	}
	return s.sendPage(c, pageData{PoolID: id, Key: key})
}

// pageData fills the page template: one of CalendarID, PoolID and
// CalendarIDs (ids separated by commas).
type pageData struct{ CalendarID, PoolID, CalendarIDs, Key, Date, Script string }

// sendPage answers with the page of d, opening on ?date= when given.
func (s *Server) sendPage(c *fiber.Ctx, d pageData) error {
	d.Date = c.Query("date")
	if d.Date != "" && !pageDate.MatchString(d.Date) {
		return invalid(actor.FieldError{Field: "date", Message: "must be a date YYYY-MM-DD"})
	}
	d.Script = "/ui/bookline.js"
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, d); err != nil {
		return err
	}
	pageHeaders(c)
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	return c.Send(buf.Bytes())
}

// script serves the component. Other sites load it with a plain <script
// src>, which needs no CORS; Cross-Origin-Resource-Policy lets pages that
// isolate themselves (COEP) load it too.
func (s *Server) script(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, "text/javascript; charset=utf-8")
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set("Cross-Origin-Resource-Policy", "cross-origin")
	c.Set(fiber.HeaderCacheControl, "public, max-age=300")
	return c.Send(ui.Script)
}

// calendarPageResponse is what a booking page shows of a calendar: no
// rules beyond the durations to offer, nothing about its bookings or its
// Google link.
type calendarPageResponse struct {
	CalendarID string `json:"calendar_id"`
	Name       string `json:"name"`
	Timezone   string `json:"timezone"`
	// DurationsMinutes are the durations a visitor may pick: the allowed
	// durations, or one within the minimum and maximum (30 if it fits).
	DurationsMinutes []int `json:"durations_minutes"`
	// StepMinutes is the grid of the starts availability lists when asked
	// without a step: the calendar's slot step, else the default. A page
	// sizes its month queries by it to stay within the cost budget.
	StepMinutes       int `json:"step_minutes"`
	HorizonDays       int `json:"horizon_days,omitempty"`
	MaxHoldTTLSeconds int `json:"max_hold_ttl_seconds"`
}

func (s *Server) calendarPage(c *fiber.Ctx) error {
	out, err := s.readCalendar(c)
	if err != nil {
		return err
	}
	return c.JSON(pageInfo(&out))
}

// pageInfo is what a booking page shows of calendar cal.
func pageInfo(cal *data.Calendar) calendarPageResponse {
	r := &cal.Rules
	durations := r.AllowedDurationsMinutes
	if len(durations) == 0 {
		d := 30
		if r.MinDurationMinutes > 0 && d < r.MinDurationMinutes {
			d = r.MinDurationMinutes
		}
		if r.MaxDurationMinutes > 0 && d > r.MaxDurationMinutes {
			d = r.MaxDurationMinutes
		}
		durations = []int{d}
	}
	ttl := r.MaxHoldTTLSeconds
	if ttl <= 0 {
		ttl = int(actor.DefaultMaxHoldTTL.Seconds())
	}
	step := r.SlotStepMinutes
	if step <= 0 {
		step = int(actor.DefaultAvailabilityStep / time.Minute)
	}
	return calendarPageResponse{CalendarID: cal.ID, Name: cal.Name, Timezone: cal.Timezone,
		DurationsMinutes: durations, StepMinutes: step, HorizonDays: r.HorizonDays, MaxHoldTTLSeconds: ttl}
}

// poolPageResponse is what a booking page shows of a pool: its calendars'
// page profiles (calendarPageResponse) folded into one, so that the
// component asks the pool what it asks a calendar.
type poolPageResponse struct {
	PoolID string `json:"pool_id"`
	// Calendars name the pool's calendars, in the pool's order, so that
	// the page can say which one a hold went to.
	Calendars []poolPageCalendar `json:"calendars"`
	// Timezone is the first calendar's.
	Timezone string `json:"timezone"`
	// DurationsMinutes are every duration some calendar offers, the first
	// calendar's first: a duration only some offer is booked on those.
	DurationsMinutes []int `json:"durations_minutes"`
	// StepMinutes is the finest grid of the calendars. Pool availability
	// counts the starts of every calendar, so a page sizes its month
	// queries by it and by the number of calendars.
	StepMinutes int `json:"step_minutes"`
	// HorizonDays is the furthest horizon, absent when some calendar has
	// none: a day is free when some calendar is.
	HorizonDays int `json:"horizon_days,omitempty"`
	// MaxHoldTTLSeconds is the shortest, so that a hold the page asks for
	// is within every calendar's limit, whichever the pool chooses.
	MaxHoldTTLSeconds int `json:"max_hold_ttl_seconds"`
}

type poolPageCalendar struct {
	CalendarID string `json:"calendar_id"`
	Name       string `json:"name"`
}

// poolPage serves GET /v1/pools/{poolId}/page (the <bookline-booking
// pool="..."> component's first read): open to the keys that may use
// every calendar of the pool, which may read each calendar's page anyway.
func (s *Server) poolPage(c *fiber.Ctx) error {
	id, err := poolID(c)
	if err != nil {
		return err
	}
	p, err := s.readPool(c, id)
	if err != nil {
		return err
	}
	if err := mayUsePool(c, &p); err != nil {
		return err
	}
	for _, cal := range p.CalendarIDs {
		if err := s.syncRead(c, cal); err != nil {
			return err
		}
	}
	out := poolPageResponse{PoolID: id, Calendars: []poolPageCalendar{}, DurationsMinutes: []int{}}
	noHorizon := false
	err = s.backend.View(func(tx *data.Tx) error {
		for i, id := range p.CalendarIDs {
			cal, err := tx.Calendar(id)
			if err != nil {
				return calendarErr(id, err)
			}
			info := pageInfo(&cal)
			out.Calendars = append(out.Calendars, poolPageCalendar{CalendarID: id, Name: info.Name})
			for _, d := range info.DurationsMinutes {
				if !slices.Contains(out.DurationsMinutes, d) {
					out.DurationsMinutes = append(out.DurationsMinutes, d)
				}
			}
			if i == 0 {
				out.Timezone, out.StepMinutes, out.MaxHoldTTLSeconds = info.Timezone, info.StepMinutes, info.MaxHoldTTLSeconds
			}
			out.StepMinutes = min(out.StepMinutes, info.StepMinutes)
			out.MaxHoldTTLSeconds = min(out.MaxHoldTTLSeconds, info.MaxHoldTTLSeconds)
			noHorizon = noHorizon || info.HorizonDays == 0
			out.HorizonDays = max(out.HorizonDays, info.HorizonDays)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if noHorizon {
		out.HorizonDays = 0
	}
	return c.JSON(out)
}
