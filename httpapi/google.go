package httpapi

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Google Calendar routes. The backend may implement GoogleSync (the
// process's wiring adds the Google sync to it); without it a linked calendar
// shows its link only.

// GoogleSync is what the API needs from the Google Calendar sync.
type GoogleSync interface {
	GoogleStatus(calID string, link *data.GoogleLink) data.GoogleStatus
	SyncGoogle(ctx context.Context, calID string) (data.BusySyncResult, error)
}

// calendarView is a calendar as GET /v1/calendars/{id} shows it: the
// stored link replaced by its live status (calendar_id, sync_busy, status
// ok|degraded, reason, pending, last_sync).
type calendarView struct {
	data.Calendar
	Google *data.GoogleStatus `json:"google,omitempty"`
}

func (s *Server) writeCalendar(c *fiber.Ctx, cal data.Calendar) error {
	g, ok := s.backend.(GoogleSync)
	if cal.Google == nil || !ok {
		return c.JSON(cal)
	}
	st := g.GoogleStatus(cal.ID, cal.Google)
	return c.JSON(calendarView{Calendar: cal, Google: &st})
}

// GoogleSyncTimeout bounds an on-demand sync.
const GoogleSyncTimeout = 60 * time.Second

// syncGoogle reads the calendar's busy time from Google now (and wakes its
// mirror if it was paused), answering once the changes are decided.
func (s *Server) syncGoogle(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	cal = strings.Clone(cal) // Fiber's parameters alias its buffers
	g, ok := s.backend.(GoogleSync)
	if !ok {
		return &Error{Code: CodeUnavailable, Message: "google sync is not available in this process"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), GoogleSyncTimeout)
	defer cancel()
	res, err := g.SyncGoogle(ctx, cal)
	switch {
	case errors.Is(err, data.ErrNotFound):
		return &Error{Code: actor.CodeCalendarNotFound, Message: "calendar not found"}
	case errors.Is(err, data.ErrNotLinked):
		return invalid(actor.FieldError{Field: "google", Message: "the calendar is not linked to a Google calendar"})
	case errors.Is(err, data.ErrNoCredentials):
		return &Error{Code: CodeUnavailable, Message: "no Google credentials are configured on the server (--google-credentials)"}
	case err != nil:
		s.log.Warn("google sync failed", "calendar", cal, "err", err)
		return &Error{Code: CodeUnavailable, Message: "reading Google failed: " + err.Error()}
	}
	var link *data.GoogleLink
	_ = s.backend.View(func(tx *data.Tx) error {
		if c, err := tx.Calendar(cal); err == nil {
			link = c.Google
		}
		return nil
	})
	out := fiber.Map{"calendar_id": cal, "busy": res}
	if link != nil {
		out["google"] = g.GoogleStatus(cal, link)
	}
	return c.JSON(out)
}
