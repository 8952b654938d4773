package httpapi

import (
	"bytes"
	"html/template"
	"regexp"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
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

var pageTemplate = template.Must(template.New("page").Parse(ui.PageTemplate))

// pageDate is the optional ?date= of a page, the day it opens on.
var pageDate = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)

func (s *Server) uiRoutes() {
	s.app.Get("/ui/bookline.js", s.script)
	s.app.Get("/book/:calendarId", s.bookPage)
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
	date := c.Query("date")
	if date != "" && !pageDate.MatchString(date) {
		return invalid(actor.FieldError{Field: "date", Message: "must be a date YYYY-MM-DD"})
	}
	var buf bytes.Buffer
	err = pageTemplate.Execute(&buf, struct{ CalendarID, Key, Date, Script string }{cal, key, date, "/ui/bookline.js"})
	if err != nil {
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
	r := &out.Rules
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
	return c.JSON(calendarPageResponse{CalendarID: out.ID, Name: out.Name, Timezone: out.Timezone,
		DurationsMinutes: durations, StepMinutes: step, HorizonDays: r.HorizonDays, MaxHoldTTLSeconds: ttl})
}
