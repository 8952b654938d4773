package httpapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Google Calendar routes, served through the Google ports of Config.Ports
// (calendarsync.Syncer implements them all). Without Ports.Google a linked
// calendar shows its link only, and the routes of a port that is nil
// answer 404 not_enabled.

// GoogleSync is the port of the Google Calendar sync: a linked calendar's
// live status, and an on-demand read of its busy time.
type GoogleSync interface {
	Status(calID string, link *data.ExternalLink) data.LinkStatus
	SyncBusy(ctx context.Context, calID string) (data.BusySyncResult, error)
}

// calendarView is a calendar as GET /v1/calendars/{id} shows it: the
// stored link replaced by its live status (calendar_id, sync_busy, status
// ok|degraded, reason, pending, last_sync).
type calendarView struct {
	data.Calendar
	Google *data.LinkStatus `json:"google,omitempty"`
}

func (s *Server) writeCalendar(c *fiber.Ctx, cal data.Calendar) error {
	g := s.cfg.Ports.Google
	if cal.Link == nil || g == nil {
		return c.JSON(cal)
	}
	st := g.Status(cal.ID, cal.Link)
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
	g := s.cfg.Ports.Google
	if g == nil {
		return notEnabled("google sync")
	}
	ctx, cancel := context.WithTimeout(context.Background(), GoogleSyncTimeout)
	defer cancel()
	res, err := g.SyncBusy(ctx, cal)
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
	var link *data.ExternalLink
	_ = s.backend.View(func(tx *data.Tx) error {
		if c, err := tx.Calendar(cal); err == nil {
			link = c.Link
		}
		return nil
	})
	out := fiber.Map{"calendar_id": cal, "busy": res}
	if link != nil {
		out["google"] = g.Status(cal, link)
	}
	return c.JSON(out)
}

// GoogleBookingChecker is the port of a Google sync that looks at a
// booking before it is sent (calendarsync.Syncer.CheckBooking): a
// *data.BeyondBusyWindowError refuses it (422 beyond_busy_window).
type GoogleBookingChecker interface {
	CheckBooking(ctx context.Context, calID string, iv data.Interval) error
}

// GoogleDeadLetters is the port of a Google sync that keeps dead letters
// (mirror operations set aside after repeated refusals). The API lists
// them from the index it reads; the port retries and drops them.
type GoogleDeadLetters interface {
	RetryDeadLetter(calID string, seq uint64, sub uint32) error
	DropDeadLetter(calID string, seq uint64, sub uint32) error
}

// GoogleNotifier is the port that takes Google push notifications
// (data.ErrUnknownChannel, data.ErrChannelToken refuse one).
type GoogleNotifier interface {
	Notification(channelID, token, state string) error
}

// CodeBeyondBusyWindow: the interval reaches past the span whose busy time
// is read from the linked Google calendar.
const CodeBeyondBusyWindow = "beyond_busy_window"

// googleCheckTimeout bounds the check before a booking (a free/busy read
// has its own, shorter bound).
const googleCheckTimeout = 10 * time.Second

// checkGoogle runs the backend's Google check of a booking, hold or
// reschedule before it is sent.
func (s *Server) checkGoogle(cmd *actor.Command) error {
	g := s.cfg.Ports.GoogleCheck
	if g == nil {
		return nil
	}
	var iv data.Interval
	switch {
	case cmd.Booking != nil:
		iv = data.Interval{Start: cmd.Booking.Start, End: cmd.Booking.End}
	case cmd.Reschedule != nil:
		iv = data.Interval{Start: cmd.Reschedule.Start, End: cmd.Reschedule.End}
	default:
		return nil
	}
	// Not c.Context(): fasthttp reuses it once the handler returns.
	ctx, cancel := context.WithTimeout(context.Background(), googleCheckTimeout)
	defer cancel()
	var beyond *data.BeyondBusyWindowError
	if err := g.CheckBooking(ctx, cmd.CalendarID, iv); errors.As(err, &beyond) {
		return &Error{Code: CodeBeyondBusyWindow, Message: "the booking ends after " + beyond.Until.UTC().Format(time.RFC3339) +
			": busy time of the linked Google calendar is read up to there only (set horizon_days to read further)"}
	}
	return nil
}

type deadLetterView struct {
	ID             string    `json:"id"`
	Op             string    `json:"op"`
	BookingID      string    `json:"booking_id"`
	GoogleCalendar string    `json:"google_calendar"`
	Reason         string    `json:"reason"`
	Attempts       int       `json:"attempts"`
	At             time.Time `json:"at"`
}

// deadLetterID names a dead letter in routes: its sequence, and ".sub"
// when it has one.
func deadLetterID(e *data.SyncEntry) string {
	id := strconv.FormatUint(e.Seq, 10)
	if e.Sub != 0 {
		id += "." + strconv.FormatUint(uint64(e.Sub), 10)
	}
	return id
}

func parseDeadLetterID(s string) (seq uint64, sub uint32, ok bool) {
	a, b, hasSub := strings.Cut(s, ".")
	seq, err := strconv.ParseUint(a, 10, 64)
	if err != nil || seq == 0 {
		return 0, 0, false
	}
	if hasSub {
		v, err := strconv.ParseUint(b, 10, 32)
		if err != nil || v == 0 {
			return 0, 0, false
		}
		sub = uint32(v)
	}
	return seq, sub, true
}

var opNames = map[byte]string{data.SyncCreate: "create", data.SyncUpdate: "update", data.SyncDelete: "delete"}

// MaxDeadLetters bounds a page of a calendar's dead letters (the default
// page size too).
const MaxDeadLetters = 1000

func (s *Server) deadLetters() (GoogleDeadLetters, error) {
	if g := s.cfg.Ports.DeadLetters; g != nil {
		return g, nil
	}
	return nil, notEnabled("google dead letters")
}

// listDeadLetters lists a page of a calendar's dead letters: up to limit,
// after the one named by cursor (the id of the previous page's last).
func (s *Server) listDeadLetters(c *fiber.Ctx) error {
	cal, err := calendarID(c)
	if err != nil {
		return err
	}
	limit, seq, sub, bad := MaxDeadLetters, uint64(0), uint32(0), []actor.FieldError(nil)
	if v := c.Query("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > MaxDeadLetters {
			bad = append(bad, actor.FieldError{Field: "limit", Message: fmt.Sprintf("must be an integer from 1 to %d", MaxDeadLetters)})
		}
	}
	if v := c.Query("cursor"); v != "" {
		var ok bool
		if seq, sub, ok = parseDeadLetterID(v); !ok {
			bad = append(bad, actor.FieldError{Field: "cursor", Message: "is not a cursor returned by this API"})
		}
	}
	if len(bad) > 0 {
		return invalid(bad...)
	}
	if _, err := s.deadLetters(); err != nil {
		return err
	}
	// The letters are in the index this process reads (the Google sync's
	// bookkeeping beside the bookings), so a page is one read of it.
	var list []data.DeadLetter
	err = s.backend.View(func(tx *data.Tx) (err error) {
		list, err = tx.DeadLettersAfter(cal, seq, sub, limit+1)
		return err
	})
	if err != nil {
		return err
	}
	var next *string
	if len(list) > limit {
		list = list[:limit]
		id := deadLetterID(&list[limit-1].Entry)
		next = &id
	}
	out := make([]deadLetterView, 0, len(list))
	for _, d := range list {
		out = append(out, deadLetterView{ID: deadLetterID(&d.Entry), Op: opNames[d.Entry.Op], BookingID: d.Entry.Booking.ID,
			GoogleCalendar: d.Entry.ExternalCalendar, Reason: d.Reason, Attempts: d.Attempts, At: d.At})
	}
	return c.JSON(fiber.Map{"calendar_id": cal, "dead_letters": out, "next_cursor": next})
}

// retryDeadLetter (retry true) puts a dead letter back in the outbox, as
// its booking is now; dropDeadLetter forgets it.
func (s *Server) deadLetterAction(retry bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		cal, err := calendarID(c)
		if err != nil {
			return err
		}
		cal = strings.Clone(cal)
		id := strings.Clone(c.Params("letterId"))
		seq, sub, ok := parseDeadLetterID(id)
		if !ok {
			return &Error{Code: CodeNotFound, Message: "dead letter not found"}
		}
		g, err := s.deadLetters()
		if err != nil {
			return err
		}
		if retry {
			err = g.RetryDeadLetter(cal, seq, sub)
		} else {
			err = g.DropDeadLetter(cal, seq, sub)
		}
		switch {
		case errors.Is(err, data.ErrNotFound):
			return &Error{Code: CodeNotFound, Message: "dead letter not found"}
		case err != nil:
			return err
		}
		action := "dropped"
		if retry {
			action = "retried"
		}
		return c.JSON(fiber.Map{"calendar_id": cal, "id": id, "result": action})
	}
}

// googleNotification takes a Google push notification: the channel id and
// token headers must name a channel this process made. Google reads
// nothing from the answer but its status.
func (s *Server) googleNotification(c *fiber.Ctx) error {
	g := s.cfg.Ports.GoogleNotifications
	if g == nil {
		return notEnabled("google push notifications")
	}
	id, tok, state := c.Get("X-Goog-Channel-ID"), c.Get("X-Goog-Channel-Token"), c.Get("X-Goog-Resource-State")
	if id == "" || state == "" {
		return invalid(actor.FieldError{Field: "X-Goog-Channel-ID", Message: "a Google notification carries X-Goog-Channel-ID and X-Goog-Resource-State"})
	}
	switch err := g.Notification(strings.Clone(id), strings.Clone(tok), strings.Clone(state)); {
	case errors.Is(err, data.ErrUnknownChannel):
		return &Error{Code: CodeNotFound, Message: "unknown channel"}
	case errors.Is(err, data.ErrChannelToken):
		return &Error{Code: CodeForbidden, Message: "wrong channel token"}
	case err != nil:
		return err
	}
	return c.JSON(fiber.Map{"ok": true})
}
