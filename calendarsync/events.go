package calendarsync

// The event a booking is mirrored as, and the calls that write it to the
// external calendar (applyOnce and its helpers), through the Provider.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/bookline/bookline/data"
)

// Private extended properties of mirrored events.
const (
	PropBookingID  = "bookline_booking_id"
	PropCalendarID = "bookline_calendar_id"
)

// Defaults of a link's event title and visibility: a mirrored event tells
// whoever can see the calendar that the time is booked, and no more.
const (
	DefaultEventTitle = "Booked"
	DefaultVisibility = "private"
)

// EventTitle fills a link's title template: {customer}, {calendar} (the
// bookline calendar id) and {booking} (the booking id) are replaced.
func EventTitle(tmpl string, bk *data.Booking) string {
	if tmpl == "" {
		tmpl = DefaultEventTitle
	}
	return strings.NewReplacer("{customer}", bk.Customer, "{calendar}", bk.CalendarID, "{booking}", bk.ID).Replace(tmpl)
}

// MirrorEvent is the event mirroring booking bk on link (its id is the
// booking id: 26 characters of base32hex, a valid client-chosen event id
// for Google and a valid resource name elsewhere). Title and visibility
// are the link's (default: "Booked", private); the description names the
// booking only.
func MirrorEvent(bk *data.Booking, link *data.ExternalLink) *Event {
	vis := DefaultVisibility
	var tmpl string
	if link != nil {
		tmpl = link.EventTitle
		if link.Visibility != "" {
			vis = link.Visibility
		}
	}
	return &Event{
		ID:              bk.ID,
		Summary:         EventTitle(tmpl, bk),
		Description:     "bookline booking " + bk.ID + " on calendar " + bk.CalendarID,
		Start:           EventTime{At: bk.Start.UTC()},
		End:             EventTime{At: bk.End.UTC()},
		Status:          EventConfirmed,
		Visibility:      vis,
		BookingID:       bk.ID,
		BookingCalendar: bk.CalendarID,
	}
}

// callCtx bounds one Google call, after the shared rate limiter let it
// through.
func (s *Syncer) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	_ = s.limiter.Wait(ctx) // an ended ctx fails the call itself
	return context.WithTimeout(ctx, s.cfg.CallTimeout)
}

// errInconsistent: Google said duplicate but has no such event (retried).
var errInconsistent = errors.New("calendarsync: insert answered duplicate but the event is not there")

func (s *Syncer) applyOnce(ctx context.Context, e data.SyncEntry, link *data.ExternalLink) error {
	svc, err := s.provider(ctx)
	if err != nil {
		return err
	}
	ev := MirrorEvent(&e.Booking, link)
	g := e.ExternalCalendar
	switch e.Op {
	case data.SyncDelete:
		// Unconditional: a delete is a booking's last operation, and a
		// change of ours arriving after it carries an older etag, so
		// Google refuses it (412). The etag is of no further use.
		s.etags.forget(eventKey{g, ev.ID})
		c, cancel, err := s.mirrorCtx(ctx, e.Calendar)
		if err != nil {
			return err
		}
		err = svc.DeleteEvent(c, g, ev.ID)
		cancel()
		if act, _ := classify(err); err != nil && act == actGone {
			return nil // already deleted
		} else if err != nil && act == actNotFound {
			// Google answers 404 for a missing event and for a calendar
			// that is gone or no longer shared: only the first is done.
			return s.calendarReadable(ctx, svc, e.Calendar, g)
		}
		return err
	case data.SyncUpdate:
		// No status in this patch, a second guard besides its If-Match: a
		// patch Google applies late must never bring a deleted event back.
		moved := *ev
		moved.Status = ""
		err := s.patch(ctx, svc, e.Calendar, g, &moved)
		if act, _ := classify(err); err != nil && (act == actNotFound || act == actGone) {
			return s.insert(ctx, svc, e.Calendar, g, ev) // never mirrored (linked later)
		}
		return err
	default:
		return s.insert(ctx, svc, e.Calendar, g, ev)
	}
}

// preconditionRounds is how often patch reads the event and tries again
// after 412s in a row before it leaves the operation to mirrorOne's
// backoff: a few rounds absorb a late write or a hand edit at once, and
// an event that keeps changing under it cannot make it spin.
const preconditionRounds = 3

// getEvent reads the event of bookline calendar cal's mirror and remembers
// its etag. Fenced like a change: what a read returns decides the next
// write.
func (s *Syncer) getEvent(ctx context.Context, svc Provider, cal, g, id string) (*Event, error) {
	c, cancel, err := s.mirrorCtx(ctx, cal)
	if err != nil {
		return nil, err
	}
	got, err := svc.GetEvent(c, g, id)
	cancel()
	if err != nil {
		s.etags.forget(eventKey{g, id})
		return nil, err
	}
	s.etags.put(eventKey{g, id}, got.Etag)
	return got, nil
}

// patch brings the event to ev by a patch conditional on the etag the
// mirror last saw (If-Match), reading the event first when that etag is
// not known; an event that already is ev is left alone. A write of ours
// that Google applies late (its call timed out here) carries an older
// etag than any later change, so Google refuses it instead of letting it
// overwrite that change. 412 means the event changed since its etag was
// read: it is read and patched again. cal is the bookline calendar (for
// the failure counts).
//
// Google answers 403 to a change of an event its owner deleted in the UI;
// that 403 is about the event, not the link.
func (s *Syncer) patch(ctx context.Context, svc Provider, cal, g string, ev *Event) error {
	key := eventKey{g, ev.ID}
	etag, known := s.etags.get(key)
	for round := 1; ; round++ {
		if !known {
			got, err := s.getEvent(ctx, svc, cal, g, ev.ID)
			if err != nil {
				return err
			}
			if got.Status != EventCancelled && sameEvent(got, ev) {
				return nil
			}
			etag = got.Etag
		}
		c, cancel, err := s.mirrorCtx(ctx, cal)
		if err != nil {
			return err
		}
		got, err := svc.PatchEvent(c, g, ev, etag)
		cancel()
		if err == nil {
			s.etags.put(key, got.Etag)
			return nil
		}
		// Applied or not, late or never (a timeout, a 5xx), or changed by
		// someone else (412): only a new read tells the etag.
		s.etags.forget(key)
		act, reason := classify(err)
		if act == actPrecondition && round < preconditionRounds && ctx.Err() == nil {
			s.failed(cal, reason)
			known = false
			continue
		}
		if act != actDegrade || reason != ReasonForbidden {
			return err
		}
		got, gerr := s.getEvent(ctx, svc, cal, g, ev.ID)
		if gerr == nil && got.Status == EventCancelled {
			return &entryError{fmt.Errorf("the event was deleted in Google and cannot be changed: %w", err)}
		}
		return err
	}
}

// calendarReadable tells a missing event from a missing calendar: nil when
// the calendar answers a one-event list.
func (s *Syncer) calendarReadable(ctx context.Context, svc Provider, cal, g string) error {
	c, cancel, err := s.mirrorCtx(ctx, cal)
	if err != nil {
		return err
	}
	defer cancel()
	return svc.CheckCalendar(c, g)
}

// insert creates the event (Google has no conditional insert; the
// client-chosen id makes every insert after the first answer 409); a 409
// means an earlier attempt created it: if that event was deleted since
// (status cancelled) or differs, it is restored by a conditional patch.
func (s *Syncer) insert(ctx context.Context, svc Provider, cal, g string, ev *Event) error {
	key := eventKey{g, ev.ID}
	c, cancel, err := s.mirrorCtx(ctx, cal)
	if err != nil {
		return err
	}
	created, err := svc.InsertEvent(c, g, ev)
	cancel()
	if err == nil {
		s.etags.put(key, created.Etag)
		return nil
	}
	s.etags.forget(key)
	if act, _ := classify(err); act != actConflict {
		return err
	}
	got, err := s.getEvent(ctx, svc, cal, g, ev.ID)
	if act, _ := classify(err); err != nil && (act == actNotFound || act == actGone) {
		return &entryError{errInconsistent}
	} else if err != nil {
		return err
	}
	if got.Status == EventCancelled || !sameEvent(got, ev) {
		return s.patch(ctx, svc, cal, g, ev)
	}
	return nil
}

// sameEvent: a and b show the same booking at the same time in the same
// way (what a patch would change). Providers leave out fields at their
// defaults: an empty visibility is "default".
func sameEvent(a, b *Event) bool {
	orDef := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	return a.Start.At.Equal(b.Start.At) && a.End.At.Equal(b.End.At) && a.BookingID == b.BookingID && a.Summary == b.Summary &&
		a.Description == b.Description && orDef(a.Visibility, "default") == orDef(b.Visibility, "default") &&
		a.Transparent == b.Transparent
}
