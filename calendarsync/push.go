package calendarsync

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"time"

	"github.com/bookline/bookline/data"
)

// Push notifications (events.watch). Where a public URL of the API's
// notification route is configured (Config.WebhookURL), every busy-synced
// calendar gets a channel: Google POSTs there when the calendar changes,
// and the route makes the Syncer read that calendar at once instead of at
// the next poll. Channels are renewed before they expire (a new channel,
// then the old one stopped) and stopped when the calendar stops being
// busy-synced. With a channel store (channels.go) they survive a restart
// and a change of the calendar's owner; without one they live in memory,
// are made again after a restart and the old ones expire on their own
// (their notifications are answered 404). Polling goes on all the while
// at BusyInterval: it is the fallback when a watch fails or a
// notification is lost.

// pushChannel is a live channel of one calendar.
type pushChannel struct {
	cal, googleCal string
	id, token      string
	resourceID     string
	expires        time.Time
	renewAt        time.Time
}

// Push states shown in the link status.
const (
	PushActive  = "active"  // a channel is live
	PushPolling = "polling" // no channel (watch failed): polling only
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// goWatchAll makes or renews the channels of every busy-synced calendar
// and stops those of calendars no longer busy-synced.
func (s *Syncer) goWatchAll(ctx context.Context) {
	if s.cfg.WebhookURL == "" || !s.watching.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.watching.Store(false)
		var extra []*pushChannel
		if s.persistent() {
			var ok bool
			if extra, ok = s.loadChannels(ctx); !ok {
				return // tried again at the next check; polling goes on
			}
		}
		want := map[string]string{} // calendar -> Google calendar
		_ = s.store.View(func(tx *data.Tx) error {
			for _, id := range tx.CalendarIDs() {
				// Only the owner of a calendar's partition reads its busy
				// time, so only it watches the calendar.
				if c, err := tx.Calendar(id); err == nil && c.Link != nil && c.Link.SyncBusy && s.cfg.owns(id) {
					want[id] = c.Link.CalendarID
				}
			}
			return nil
		})
		now := s.cfg.Now()
		s.mu.Lock()
		stale := extra
		need := map[string]string{}
		for cal, g := range want {
			ch := s.chanByCal[cal]
			l := s.links[cal]
			if ch == nil || ch.googleCal != g || !now.Before(ch.renewAt) {
				if l == nil || !now.Before(l.watchRetryAt) {
					need[cal] = g
				}
			}
		}
		for cal, ch := range s.chanByCal {
			if want[cal] != ch.googleCal {
				stale = append(stale, ch)
			}
		}
		s.mu.Unlock()
		for _, ch := range stale {
			s.stopChannel(ctx, ch)
		}
		for cal, g := range need {
			if ctx.Err() != nil {
				return
			}
			s.watch(ctx, cal, g)
		}
	}()
}

// watch makes a new channel for cal and then stops the one it replaces.
func (s *Syncer) watch(ctx context.Context, cal, g string) {
	svc, err := s.provider(ctx)
	if err != nil {
		return
	}
	ttl := s.cfg.ChannelTTL
	ch := &pushChannel{cal: cal, googleCal: g, id: "bookline-" + randomHex(16), token: randomHex(24)}
	ch.expires = s.cfg.Now().Add(ttl)
	ch.renewAt = ch.expires
	// Known before Google confirms it: the "sync" message may come first,
	// and a change right after it, to any instance.
	s.mu.Lock()
	s.chanByID[ch.id] = ch
	s.mu.Unlock()
	if err := s.saveChannel(ctx, ch); err != nil {
		s.mu.Lock()
		s.watchFailedLocked(s.linkLocked(cal), ch.id, s.cfg.Now())
		s.mu.Unlock()
		s.log.Warn("google push channel not made: the channel store is not writable; polling only", "calendar", cal, "err", err)
		return
	}
	c, cancel := s.callCtx(ctx)
	resourceID, expires, err := svc.Watch(c, g, WatchRequest{ID: ch.id, Token: ch.token, Address: s.cfg.WebhookURL, TTL: ttl})
	cancel()
	l := s.link(cal)
	now := s.cfg.Now()
	s.mu.Lock()
	if err != nil {
		s.watchFailedLocked(l, ch.id, now)
		s.mu.Unlock()
		s.deleteChannel(ctx, ch.id)
		if ctx.Err() == nil {
			_, reason := classify(err)
			s.failed(cal, reason)
			s.log.Warn("google push channel not made; polling only", "calendar", cal, "err", err)
		}
		return
	}
	ch.resourceID = resourceID
	ch.expires = now.Add(ttl)
	if !expires.IsZero() {
		ch.expires = expires
	}
	// Renew at four fifths of the lifetime, early enough to retry.
	ch.renewAt = now.Add(ch.expires.Sub(now) * 4 / 5)
	old := s.chanByCal[cal]
	s.chanByCal[cal] = ch
	l.watchFails, l.push = 0, PushActive
	s.mu.Unlock()
	if err := s.saveChannel(ctx, ch); err != nil {
		// The record made before the watch names the channel and its
		// token: notifications are recognised; only its renewal and stop
		// need the resource id, and it expires on its own otherwise.
		s.log.Warn("google push channel made but not recorded in full", "calendar", cal, "err", err)
	}
	if old != nil {
		s.stopChannel(ctx, old)
	}
}

// watchFailedLocked forgets channel id, which was not made, and has link l
// poll and try again after a backoff. s.mu is held.
func (s *Syncer) watchFailedLocked(l *linkState, id string, now time.Time) {
	delete(s.chanByID, id)
	l.watchFails++
	l.watchRetryAt = now.Add(backoff(l.watchFails, s.cfg.RetryBase*20, s.cfg.PauseMax))
	l.push = PushPolling
}

// stopChannel stops a channel in Google and forgets it.
func (s *Syncer) stopChannel(ctx context.Context, ch *pushChannel) {
	s.mu.Lock()
	delete(s.chanByID, ch.id)
	if s.chanByCal[ch.cal] == ch {
		delete(s.chanByCal, ch.cal)
		if l := s.links[ch.cal]; l != nil {
			l.push = ""
		}
	}
	s.mu.Unlock()
	s.deleteChannel(ctx, ch.id)
	svc, err := s.provider(ctx)
	if err != nil || ch.resourceID == "" {
		return
	}
	c, cancel := s.callCtx(ctx)
	defer cancel()
	if err := svc.StopWatch(c, ch.id, ch.resourceID); err != nil && ctx.Err() == nil {
		s.log.Info("stopping a google push channel failed; it expires on its own", "calendar", ch.cal, "err", err)
	}
}

// Notification handles one push notification: the channel must be one
// bookline made (this process, or with a channel store any instance and
// any earlier start) and token its token (data.ErrUnknownChannel,
// data.ErrChannelToken otherwise). A change ("exists", "not_exists")
// reads the calendar's busy time in the background, on this instance;
// "sync" (the channel's first message) does nothing.
func (s *Syncer) Notification(channelID, token, state string) error {
	ch, err := s.lookupChannel(channelID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	ctx := s.runCtx
	s.mu.Unlock()
	if ch == nil {
		return data.ErrUnknownChannel
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(ch.token)) != 1 {
		return data.ErrChannelToken
	}
	if state == "sync" || ctx == nil {
		return nil
	}
	if s.cfg.CatchUp == nil || s.cfg.owns(ch.cal) {
		s.readNotified(ctx, ch)
		return nil
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		cctx, cancel := context.WithTimeout(ctx, storeTimeout)
		err := s.cfg.CatchUp(cctx, ch.cal)
		cancel()
		if err != nil {
			s.log.Warn("catching up a notified calendar owned by another instance; read from the index as it is", "calendar", ch.cal, "err", err)
		}
		s.readNotified(ctx, ch)
	}()
	return nil
}

// readNotified reads the busy time of a notified channel's calendar if it
// is still busy-synced with the channel's Google calendar.
func (s *Syncer) readNotified(ctx context.Context, ch *pushChannel) {
	var c data.Calendar
	if err := s.store.View(func(tx *data.Tx) (err error) { c, err = tx.Calendar(ch.cal); return err }); err != nil {
		return // gone since; the channel is stopped at the next check
	}
	if c.Link != nil && c.Link.SyncBusy && c.Link.CalendarID == ch.googleCal {
		s.goBusyOne(ctx, c, s.link(ch.cal))
	}
}
