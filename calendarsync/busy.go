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

	"google.golang.org/api/calendar/v3"

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
			if c, err := tx.Calendar(id); err == nil && c.Google != nil && c.Google.SyncBusy && s.cfg.owns(id) {
				cals = append(cals, c)
			}
		}
		return nil
	})
	for _, c := range cals {
		l := s.link(c.ID)
		if !l.busy.TryLock() {
			continue // the previous read is still running
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer l.busy.Unlock()
			if _, err := s.busyLocked(ctx, c, l); err != nil && ctx.Err() == nil {
				s.log.Warn("reading busy time from google", "calendar", c.ID, "err", err)
			}
		}()
	}
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
	if c.Google == nil {
		return data.BusySyncResult{}, data.ErrNotLinked
	}
	if s.cfg.Service == nil {
		return data.BusySyncResult{}, data.ErrNoCredentials
	}
	s.Wake(cal)
	if !c.Google.SyncBusy {
		return data.BusySyncResult{}, nil
	}
	l := s.link(cal)
	l.busy.Lock()
	defer l.busy.Unlock()
	return s.busyLocked(ctx, c, l)
}

// busyLocked reads one calendar's busy time; l.busy is held.
func (s *Syncer) busyLocked(ctx context.Context, c data.Calendar, l *linkState) (res data.BusySyncResult, err error) {
	defer func() {
		if err != nil && ctx.Err() == nil {
			act, reason := classify(err)
			s.failed(c.ID, reason)
			if act == actDegrade || act == actNotFound {
				s.degrade(c.ID, reason, err)
			}
		}
	}()
	svc, err := s.service(ctx)
	if err != nil {
		return res, err
	}
	g := c.Google.CalendarID
	now := s.cfg.Now()
	horizon := s.cfg.Horizon
	if c.HorizonDays > 0 {
		horizon = time.Duration(c.HorizonDays) * 24 * time.Hour
	}
	window := data.Interval{Start: now.Add(-24 * time.Hour), End: now.Add(horizon)}
	loc, err := zones.Load(c.Timezone)
	if err != nil {
		loc = time.UTC
	}
	res.Full = l.syncToken == "" || l.tokenFor != g || now.Sub(l.lastFull) > s.cfg.FullResyncEvery
	var items []*calendar.Event
	var next string
	if !res.Full {
		items, next, err = s.listEvents(ctx, svc, g, l.syncToken, window)
		if act, _ := classify(err); err != nil && act == actGone {
			s.log.Info("google sync token expired; full resync", "calendar", c.ID)
			res.Full, err = true, nil
		} else if err != nil {
			return res, err
		}
	}
	if res.Full {
		if items, next, err = s.listEvents(ctx, svc, g, "", window); err != nil {
			return res, err
		}
	}
	res.Events = len(items)
	var blocks []data.BusyBlock
	if err := s.store.View(func(tx *data.Tx) (err error) {
		blocks, err = tx.BusyBlocks(c.ID)
		return err
	}); err != nil {
		return res, err
	}
	have := map[string]data.BusyBlock{}
	for _, b := range blocks {
		have[b.ID] = b
	}
	seen := map[string]bool{}
	var cmds []*actor.Command
	for _, ev := range items {
		id := BlockID(g, ev.Id)
		seen[id] = true
		cur, known := have[id]
		live := known && !cur.Cleared
		if iv, busy := busyInterval(ev, loc, window); busy {
			if !live || !cur.Start.Equal(iv.Start) || !cur.End.Equal(iv.End) {
				cmds = append(cmds, busyCommand(c.ID, actor.TypeBusySet, id, iv, cur.Seq))
				res.Set++
			}
		} else if live {
			cmds = append(cmds, busyCommand(c.ID, actor.TypeBusyClear, id, data.Interval{}, cur.Seq))
			res.Cleared++
		}
	}
	if res.Full {
		for _, b := range blocks {
			if !b.Cleared && !seen[b.ID] && strings.HasPrefix(b.ID, BlockPrefix) {
				cmds = append(cmds, busyCommand(c.ID, actor.TypeBusyClear, b.ID, data.Interval{}, b.Seq))
				res.Cleared++
			}
		}
	}
	for _, cmd := range cmds {
		if err := s.publish(ctx, cmd); err != nil {
			return res, fmt.Errorf("calendarsync: publish %s: %w", cmd.Type, err)
		}
	}
	// Only now: a token is kept only once everything it covers is in
	// the log.
	l.syncToken, l.tokenFor = next, g
	if res.Full {
		l.lastFull = now
	}
	s.succeeded(c.ID)
	return res, nil
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

// listEvents reads every page of events.list: a full read over window when
// token is empty (timeMin/timeMax are allowed only there), else the changes
// since token. It returns the items and the next sync token.
func (s *Syncer) listEvents(ctx context.Context, svc *calendar.Service, g, token string, window data.Interval) ([]*calendar.Event, string, error) {
	var items []*calendar.Event
	page := ""
	for {
		call := svc.Events.List(g).SingleEvents(true).MaxResults(250)
		if token != "" {
			call = call.SyncToken(token)
		} else {
			call = call.TimeMin(window.Start.UTC().Format(time.RFC3339)).TimeMax(window.End.UTC().Format(time.RFC3339))
		}
		if page != "" {
			call = call.PageToken(page)
		}
		var out *calendar.Events
		err := retry(ctx, s, g, func(c context.Context) (err error) {
			out, err = call.Context(c).Do()
			return err
		})
		if err != nil {
			return nil, "", err
		}
		items = append(items, out.Items...)
		if out.NextPageToken == "" {
			return items, out.NextSyncToken, nil
		}
		page = out.NextPageToken
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

// busyInterval returns the busy interval of a Google event: opaque,
// not cancelled, not declined by the calendar's owner, not one of
// bookline's own mirrors, and reaching into window.
func busyInterval(ev *calendar.Event, loc *time.Location, window data.Interval) (data.Interval, bool) {
	if ev.Status == "cancelled" || ev.Transparency == "transparent" {
		return data.Interval{}, false
	}
	if ev.ExtendedProperties != nil && ev.ExtendedProperties.Private[PropBookingID] != "" {
		return data.Interval{}, false
	}
	for _, a := range ev.Attendees {
		if a != nil && a.Self && a.ResponseStatus == "declined" {
			return data.Interval{}, false
		}
	}
	start, ok1 := eventTime(ev.Start, loc)
	end, ok2 := eventTime(ev.End, loc)
	if !ok1 || !ok2 || !start.Before(end) {
		return data.Interval{}, false
	}
	if end.Sub(start) > actor.MaxBusyDuration {
		end = start.Add(actor.MaxBusyDuration)
	}
	iv := data.Interval{Start: start.UTC(), End: end.UTC()}
	if !iv.Overlaps(window) || iv.Start.Year() < actor.MinYear || iv.End.Year() > actor.MaxYear {
		return data.Interval{}, false
	}
	return iv, true
}

// eventTime reads a Google event time; all-day dates are midnight in the
// bookline calendar's time zone.
func eventTime(d *calendar.EventDateTime, loc *time.Location) (time.Time, bool) {
	if d == nil {
		return time.Time{}, false
	}
	if d.DateTime != "" {
		t, err := time.Parse(time.RFC3339, d.DateTime)
		return t, err == nil
	}
	t, err := time.ParseInLocation(time.DateOnly, d.Date, loc)
	return t, err == nil
}
