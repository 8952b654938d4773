package calendarsync

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/data"
)

// BlockPrefix starts the id of every busy block imported from Google; a
// full resync clears blocks with this prefix that Google no longer has and
// leaves other blocks alone.
const BlockPrefix = "g."

var lowerBase32Hex = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// BlockID is the busy block id of Google event eventID of Google calendar
// googleCal: deterministic, so every sync names the same block.
func BlockID(googleCal, eventID string) string {
	sum := sha256.Sum256([]byte(googleCal + "\x00" + eventID))
	return BlockPrefix + lowerBase32Hex.EncodeToString(sum[:16])
}

func (s *Syncer) goBusyAll(ctx context.Context) {
	var cals []data.Calendar
	_ = s.store.View(func(tx *data.Tx) error {
		for _, id := range tx.CalendarIDs() {
			if c, err := tx.Calendar(id); err == nil && c.Link != nil && c.Link.SyncBusy && s.cfg.owns(id) {
				cals = append(cals, c)
			}
		}
		return nil
	})
	for _, c := range cals {
		s.goBusyOne(ctx, c, s.link(c.ID))
	}
}

// goBusyOne reads calendar c's busy time in the background, unless a read
// of it is running.
// A read asked for while one runs is made once more after it (a change
// notified during a read may have come too late for it).
func (s *Syncer) goBusyOne(ctx context.Context, c data.Calendar, l *linkState) {
	if !l.busy.TryLock() {
		l.again.Store(true)
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer l.busy.Unlock()
		for {
			l.again.Store(false)
			if _, err := s.busyLocked(ctx, c, l); err != nil && ctx.Err() == nil {
				s.log.Warn("reading busy time from google", "calendar", c.ID, "err", err)
			}
			if !l.again.Load() || ctx.Err() != nil {
				return
			}
			if err := s.store.View(func(tx *data.Tx) (err error) { c, err = tx.Calendar(c.ID); return err }); err != nil ||
				c.Link == nil || !c.Link.SyncBusy {
				return
			}
		}
	}()
}

// SyncBusy reads calendar cal's busy time from Google now and sends the
// changes through the log; it returns once they are decided. It also
// wakes the calendar's mirror if it was paused.
func (s *Syncer) SyncBusy(ctx context.Context, cal string) (data.BusySyncResult, error) {
	var c data.Calendar
	err := s.store.View(func(tx *data.Tx) (err error) {
		c, err = tx.Calendar(cal)
		return err
	})
	if err != nil {
		return data.BusySyncResult{}, err
	}
	if c.Link == nil {
		return data.BusySyncResult{}, data.ErrNotLinked
	}
	if s.cfg.Provider == nil {
		return data.BusySyncResult{}, data.ErrNoCredentials
	}
	s.Wake(cal)
	if !c.Link.SyncBusy {
		return data.BusySyncResult{}, nil
	}
	l := s.link(cal)
	l.busy.Lock()
	defer l.busy.Unlock()
	return s.busyLocked(ctx, c, l)
}

// busyLocked reads one calendar's busy time; l.busy is held.
func (s *Syncer) busyLocked(ctx context.Context, c data.Calendar, l *linkState) (res data.BusySyncResult, err error) {
	s.mu.Lock()
	s.busyKnown[c.ID] = true
	s.mu.Unlock()
	l.attempted = true
	defer func() {
		if err != nil && ctx.Err() == nil {
			act, reason := classify(err)
			s.failed(c.ID, reason)
			switch act {
			case actDegrade, actNotFound:
				s.degrade(c.ID, reason, err)
			case actThrottle:
				s.throttle(c.ID, err)
			}
		}
	}()
	if !s.waitThrottle(ctx) {
		return res, ctx.Err()
	}
	svc, err := s.provider(ctx)
	if err != nil {
		return res, err
	}
	g := c.Link.CalendarID
	now := s.cfg.Now()
	window := s.readWindow(&c, now)
	res.Full = l.syncToken == "" || l.tokenFor != g || now.Sub(l.lastFull) > s.cfg.FullResyncEvery ||
		l.windowEnd.Before(window.End)
	var items []*Event
	var next, tz string
	if !res.Full {
		items, next, tz, err = s.listEvents(ctx, svc, g, l.syncToken, window)
		if act, _ := classify(err); err != nil && act == actGone {
			s.log.Info("google sync token expired; full resync", "calendar", c.ID)
			res.Full, err = true, nil
		} else if err != nil {
			return res, err
		}
	}
	if res.Full {
		if items, next, tz, err = s.listEvents(ctx, svc, g, "", window); err != nil {
			return res, err
		}
	}
	// All-day events are days of the Google calendar's zone.
	loc, err := zones.Load(tz)
	if tz == "" || err != nil {
		if loc, err = zones.Load(c.Timezone); err != nil {
			loc = time.UTC
		}
	}
	pad := padding{before: time.Duration(c.BufferAfterMinutes) * time.Minute, after: time.Duration(c.BufferBeforeMinutes) * time.Minute}
	res.Events = len(items)
	var blocks []data.BusyBlock
	if err := s.store.View(func(tx *data.Tx) (err error) {
		blocks, err = tx.BusyBlocks(c.ID)
		return err
	}); err != nil {
		return res, err
	}
	cmds := busyCommands(c.ID, g, items, blocks, busyView{loc: loc, window: window, pad: pad}, &res)
	for _, cmd := range cmds {
		if err := s.publish(ctx, cmd); err != nil {
			return res, fmt.Errorf("calendarsync: publish %s: %w", cmd.Type, err)
		}
	}
	// Only now: a token is kept only once everything it covers is in
	// the log.
	l.syncToken, l.tokenFor = next, g
	if res.Full {
		l.lastFull, l.windowEnd = now, window.End
	}
	s.succeeded(c.ID)
	return res, nil
}

// busyView is how a linked calendar's events become busy intervals: the
// zone of its all-day events, the window read, and the calendar's buffers
// (padding).
type busyView struct {
	loc    *time.Location
	window data.Interval
	pad    padding
}

// busyCommands are the busy.set and busy.clear commands that bring
// calendar calID's busy blocks (blocks) to what the events read from its
// link g say; with res.Full the read was complete, so blocks of events it
// no longer lists are cleared too. It counts them in res.
func busyCommands(calID, g string, items []*Event, blocks []data.BusyBlock, v busyView, res *data.BusySyncResult) []*actor.Command {
	have := map[string]data.BusyBlock{}
	for _, b := range blocks {
		have[b.ID] = b
	}
	seen := map[string]bool{}
	var cmds []*actor.Command
	for _, ev := range items {
		var ivs []data.Interval
		if busyEvent(ev, calID) {
			ivs = busyIntervals(ev, v.loc, v.window, v.pad)
		}
		for k := 0; k < maxChunks; k++ {
			id := chunkID(g, ev.ID, k)
			cur, known := have[id]
			live := known && !cur.Cleared
			if k < len(ivs) {
				seen[id] = true
				iv := ivs[k]
				if !live || !cur.Start.Equal(iv.Start) || !cur.End.Equal(iv.End) {
					cmds = append(cmds, busyCommand(calID, actor.TypeBusySet, id, iv, cur.Seq))
					res.Set++
				}
			} else if live {
				cmds = append(cmds, busyCommand(calID, actor.TypeBusyClear, id, data.Interval{}, cur.Seq))
				res.Cleared++
			}
		}
	}
	if res.Full {
		for _, b := range blocks {
			if !b.Cleared && !seen[b.ID] && strings.HasPrefix(b.ID, BlockPrefix) {
				cmds = append(cmds, busyCommand(calID, actor.TypeBusyClear, b.ID, data.Interval{}, b.Seq))
				res.Cleared++
			}
		}
	}
	return cmds
}

// busyCommand builds busy.set or busy.clear. The request id is derived
// from the content and from the block's last change in the index (prevSeq),
// so repeated syncs of the same state dedupe, and setting a block again
// after it was cleared is a new request.
func busyCommand(cal, typ, id string, iv data.Interval, prevSeq uint64) *actor.Command {
	h := sha256.Sum256([]byte(typ + "\x00" + id + "\x00" + iv.Start.UTC().Format(time.RFC3339Nano) + "\x00" +
		iv.End.UTC().Format(time.RFC3339Nano) + "\x00" + strconv.FormatUint(prevSeq, 10)))
	cmd := &actor.Command{V: actor.SchemaVersion, Type: typ, CalendarID: cal, RequestID: "gbusy." + hex.EncodeToString(h[:16]),
		Busy: &actor.BusySpec{BlockID: id}}
	if typ == actor.TypeBusySet {
		cmd.Busy.Start, cmd.Busy.End = iv.Start.UTC(), iv.End.UTC()
	}
	return cmd
}

// listEvents reads every page of the calendar's events: a full read over
// window when token is empty, else the changes since token. It returns
// the items and the next sync token.
func (s *Syncer) listEvents(ctx context.Context, svc Provider, g, token string, window data.Interval) (items []*Event, next, tz string, err error) {
	// Recurring events are read as their instances, so that each
	// instance, its exceptions and cancelled occurrences are blocks of
	// their own.
	q := ListQuery{SyncToken: token, Window: window}
	for {
		var out *EventPage
		err := retry(ctx, s, g, func(c context.Context) (err error) {
			out, err = svc.ListEvents(c, g, q)
			return err
		})
		if err != nil {
			return nil, "", "", err
		}
		items = append(items, out.Items...)
		if out.TimeZone != "" {
			tz = out.TimeZone
		}
		if out.NextPageToken == "" {
			return items, out.NextSyncToken, tz, nil
		}
		q.PageToken = out.NextPageToken
	}
}

// retry runs one read call with the transient-failure backoff (a few
// attempts; the periodic sync tries again later anyway).
func retry(ctx context.Context, s *Syncer, _ string, fn func(context.Context) error) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		c, cancel := s.callCtx(ctx)
		err = fn(c)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if act, _ := classify(err); act != actRetry {
			return err
		}
		if !sleep(ctx, backoff(attempt, s.cfg.RetryBase, s.cfg.RetryMax), nil) {
			return ctx.Err()
		}
	}
	return err
}

// maxChunks bounds the blocks one event becomes: a block lasts at most
// actor.MaxBusyDuration and the read window at most MaxHorizonDays plus a
// few days.
const maxChunks = (actor.MaxHorizonDays+30)/366 + 1

// chunkID is the block id of part k of a Google event (the first part has
// the event's plain block id).
func chunkID(g, eventID string, k int) string {
	if k == 0 {
		return BlockID(g, eventID)
	}
	return BlockID(g, eventID+"\x00"+strconv.Itoa(k))
}

// readWindow is the span of busy time read for calendar c: from the start
// of yesterday (UTC) to as far as a booking accepted now may reach (the
// calendar's horizon_days or, without one, Config.Horizon, plus its longest
// booking and its buffer after), rounded up to a whole day. Both ends move
// once a day, so that an event clipped to the window is not set again at
// every read.
func (s *Syncer) readWindow(c *data.Calendar, now time.Time) data.Interval {
	horizon := s.cfg.Horizon
	if c.HorizonDays > 0 {
		horizon = time.Duration(c.HorizonDays) * 24 * time.Hour
	}
	longest := actor.MaxBookingDuration
	if c.MaxDurationMinutes > 0 {
		longest = time.Duration(c.MaxDurationMinutes) * time.Minute
	}
	day := 24 * time.Hour
	end := now.UTC().Add(horizon + longest + time.Duration(c.BufferAfterMinutes)*time.Minute)
	return data.Interval{Start: now.UTC().Truncate(day).Add(-day), End: end.Truncate(day).Add(day)}
}

// BookableUntil is the end of the span whose busy time is read for
// calendar c at now: a booking ending later cannot be checked against
// Google. ok is false when c's busy time is not read.
func (s *Syncer) BookableUntil(c *data.Calendar, now time.Time) (end time.Time, ok bool) {
	if c.Link == nil || !c.Link.SyncBusy {
		return time.Time{}, false
	}
	return s.readWindow(c, now).End, true
}

// padding widens a busy interval: a booking's buffers may not overlap busy
// time, so the block reaches back by the buffer after a booking and
// forward by the buffer before one.
type padding struct{ before, after time.Duration }

// busyEvent is the policy of which external events make calendar cal
// busy:
//   - cancelled events (and cancelled instances of a series) never;
//   - KindInfo events never (Google's workingLocation and birthday: they
//     say where or what, not that the time is taken);
//   - KindAbsence events always, whatever their transparency (Google's
//     outOfOffice and focusTime);
//   - other events when opaque, unless the calendar's owner declined them;
//     tentative events, tentative answers and invitations not answered
//     yet count as busy, as in Google's own free/busy;
//   - bookline's mirrors of cal's own bookings never (they are bookings
//     already); mirrors of other bookline calendars linked to the same
//     external calendar are busy time like any event.
func busyEvent(ev *Event, cal string) bool {
	if ev.Status == EventCancelled {
		return false
	}
	if ev.BookingID != "" && ev.BookingCalendar == cal {
		return false
	}
	switch ev.Kind {
	case KindInfo:
		return false
	case KindAbsence:
		return true
	}
	return !ev.Transparent && !ev.Declined
}

// busyIntervals returns the busy blocks of a busy Google event: its span,
// padded, clipped to window (an event that began long ago blocks what is
// left of it), cut into parts of at most actor.MaxBusyDuration.
func busyIntervals(ev *Event, loc *time.Location, window data.Interval, pad padding) []data.Interval {
	start, ok1 := eventTime(ev.Start, loc)
	end, ok2 := eventTime(ev.End, loc)
	if !ok1 || !ok2 || !start.Before(end) {
		return nil
	}
	iv := data.Interval{Start: start.Add(-pad.before).UTC(), End: end.Add(pad.after).UTC()}
	if !iv.Overlaps(window) {
		return nil
	}
	if iv.Start.Before(window.Start) {
		iv.Start = window.Start
	}
	if iv.End.After(window.End) {
		iv.End = window.End
	}
	if iv.Start.Year() < actor.MinYear || iv.End.Year() > actor.MaxYear {
		return nil
	}
	var out []data.Interval
	for a := iv.Start; a.Before(iv.End) && len(out) < maxChunks; a = a.Add(actor.MaxBusyDuration) {
		out = append(out, data.Interval{Start: a, End: minTime(a.Add(actor.MaxBusyDuration), iv.End)})
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// eventTime reads an event time; all-day dates are midnight in loc, the
// external calendar's time zone.
func eventTime(d EventTime, loc *time.Location) (time.Time, bool) {
	if !d.At.IsZero() {
		return d.At, true
	}
	t, err := time.ParseInLocation(time.DateOnly, d.Date, loc)
	return t, err == nil
}

// goSweep clears, through the log, the busy blocks of calendars whose busy
// time is no longer read (unlinked, or sync_busy turned off): busy.clear
// of every live block imported from Google. A calendar linked to another
// Google calendar is read again at once (its full read clears the old
// calendar's blocks). all: every calendar (at start); else those whose
// busy time this process read. At most one sweep runs at a time.
func (s *Syncer) goSweep(ctx context.Context, all bool) {
	if !s.sweeping.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.sweeping.Store(false)
		var ids []string
		if all {
			_ = s.store.View(func(tx *data.Tx) error { ids = tx.CalendarIDs(); return nil })
		} else {
			s.mu.Lock()
			for id := range s.busyKnown {
				ids = append(ids, id)
			}
			s.mu.Unlock()
		}
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			if s.cfg.owns(id) { // the owner of its partition clears it
				s.sweepOne(ctx, id)
			}
		}
	}()
}

func (s *Syncer) sweepOne(ctx context.Context, cal string) {
	var c data.Calendar
	var blocks []data.BusyBlock
	if err := s.store.View(func(tx *data.Tx) (err error) {
		if c, err = tx.Calendar(cal); err != nil {
			return err
		}
		blocks, err = tx.BusyBlocks(cal)
		return err
	}); err != nil {
		return
	}
	l := s.link(cal)
	if c.Link != nil && c.Link.SyncBusy {
		s.mu.Lock()
		s.busyKnown[cal] = true // watched for an unlink from now on
		s.mu.Unlock()
		if !l.busy.TryLock() {
			return
		}
		// Linked to another Google calendar, or newly linked while
		// polling is on: read it now rather than at the next poll.
		moved := l.tokenFor != "" && l.tokenFor != c.Link.CalendarID || !l.attempted && s.cfg.BusyInterval > 0
		l.busy.Unlock()
		if moved {
			s.goBusyOne(ctx, c, l)
		}
		return
	}
	if !l.busy.TryLock() {
		return
	}
	defer l.busy.Unlock()
	l.syncToken, l.tokenFor = "", ""
	for _, b := range blocks {
		if b.Cleared || !strings.HasPrefix(b.ID, BlockPrefix) {
			continue
		}
		if err := s.publish(ctx, busyCommand(cal, actor.TypeBusyClear, b.ID, data.Interval{}, b.Seq)); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("clearing the busy time of an unlinked calendar", "calendar", cal, "err", err)
			}
			return
		}
	}
	s.mu.Lock()
	delete(s.busyKnown, cal)
	s.mu.Unlock()
}
