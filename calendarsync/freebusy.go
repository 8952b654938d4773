package calendarsync

import (
	"context"
	"sort"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// CheckBooking is asked by the API before it sends a booking, hold or
// reschedule of calendar cal over iv through the log:
//
//   - a busy-synced calendar refuses an interval that ends past the span
//     whose busy time is read (*data.BeyondBusyWindowError): it could not
//     be checked against Google;
//   - a link with check_freebusy has Google's free/busy of the interval
//     (with the calendar's buffers) read now, and what is busy there enters
//     the log as busy.set commands before the booking does, so the writer
//     decides the booking against it. The writer never calls Google.
//
// A free/busy read that fails or times out (FreeBusyTimeout) lets the
// booking go on against the busy time already read: a booking is never
// refused because Google is slow. Anything else returns nil.
func (s *Syncer) CheckBooking(ctx context.Context, cal string, iv data.Interval) error {
	var c data.Calendar
	var own []data.Interval
	if err := s.store.View(func(tx *data.Tx) (err error) {
		if c, err = tx.Calendar(cal); err != nil || c.Link == nil || !c.Link.CheckFreeBusy {
			return err
		}
		// The calendar's own bookings are in Google as its mirrors:
		// free/busy cannot tell them apart, so they are taken out.
		return tx.ForEachConfirmed(cal, func(_ string, b data.Interval) error {
			own = append(own, b)
			return nil
		})
	}); err != nil || c.Link == nil || !c.Link.SyncBusy {
		return nil
	}
	if until, ok := s.BookableUntil(&c, s.cfg.Now()); ok && iv.End.After(until) {
		return &data.BeyondBusyWindowError{Until: until}
	}
	if !c.Link.CheckFreeBusy || s.cfg.Provider == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FreeBusyTimeout)
	defer cancel()
	busy, err := s.freeBusy(ctx, c.Link.CalendarID, data.Interval{
		Start: iv.Start.Add(-time.Duration(c.BufferBeforeMinutes) * time.Minute),
		End:   iv.End.Add(time.Duration(c.BufferAfterMinutes) * time.Minute)})
	if err != nil {
		_, reason := classify(err)
		s.failed(cal, reason)
		s.log.Warn("google free/busy before a booking failed; deciding on the busy time already read", "calendar", cal, "err", err)
		return nil
	}
	pad := padding{before: time.Duration(c.BufferAfterMinutes) * time.Minute, after: time.Duration(c.BufferBeforeMinutes) * time.Minute}
	for _, b := range subtract(busy, own) {
		b = data.Interval{Start: b.Start.Add(-pad.before), End: b.End.Add(pad.after)}
		id := BlockID(c.Link.CalendarID, "freebusy\x00"+b.Start.UTC().Format(time.RFC3339)+"\x00"+b.End.UTC().Format(time.RFC3339))
		var prev data.BusyBlock
		_ = s.store.View(func(tx *data.Tx) error { prev, _, _ = tx.Busy(cal, id); return nil })
		if !prev.Cleared && prev.Seq != 0 {
			continue // already set
		}
		if err := s.publish(ctx, busyCommand(cal, actor.TypeBusySet, id, b, prev.Seq)); err != nil {
			s.log.Warn("publishing google free/busy failed", "calendar", cal, "err", err)
			return nil
		}
	}
	return nil
}

// freeBusy reads the busy periods of external calendar g over iv.
func (s *Syncer) freeBusy(ctx context.Context, g string, iv data.Interval) ([]data.Interval, error) {
	svc, err := s.provider(ctx)
	if err != nil {
		return nil, err
	}
	c, cancel := s.callCtx(ctx)
	defer cancel()
	return svc.FreeBusy(c, g, iv)
}

// subtract returns the parts of busy that none of own covers.
func subtract(busy, own []data.Interval) []data.Interval {
	sort.Slice(own, func(i, j int) bool { return own[i].Start.Before(own[j].Start) })
	var out []data.Interval
	for _, b := range busy {
		cur := b
		for _, o := range own {
			if !o.Overlaps(cur) {
				continue
			}
			if cur.Start.Before(o.Start) {
				out = append(out, data.Interval{Start: cur.Start, End: o.Start})
			}
			cur.Start = o.End
			if !cur.Start.Before(cur.End) {
				break
			}
		}
		if cur.Start.Before(cur.End) {
			out = append(out, cur)
		}
	}
	return out
}
