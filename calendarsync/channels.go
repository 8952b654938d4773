package calendarsync

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Push channels that outlive the process (and the instance) that made
// them. With Config.Channels and Config.Key every channel is written to
// the store before Google is asked to make it, again once Google answered
// (with its resource id and expiry), and deleted when it is stopped.
// Its token is sealed with the secrets key for that channel: whoever holds
// a token can make bookline read a calendar, and the store (a NATS KV
// bucket) may be copied.
//
// Every instance reads the store each WatchCheckEvery: the owner of a
// calendar adopts its channel (renews it when due, stops it when the
// calendar stops being busy-synced) instead of making another, and any
// instance answers a notification for any stored channel (one it does
// not know yet is looked up in the store). An instance that no longer
// owns a calendar forgets its channel without stopping it: the new owner
// goes on with it.

// ChannelStore keeps push channel records where every instance and the
// next start find them (queue.ChannelStore: a NATS KV bucket). Records are
// opaque to it.
type ChannelStore interface {
	PutChannel(ctx context.Context, id string, rec []byte) error
	// GetChannel returns nil, nil when there is no such channel.
	GetChannel(ctx context.Context, id string) ([]byte, error)
	DeleteChannel(ctx context.Context, id string) error
	ListChannels(ctx context.Context) (map[string][]byte, error)
}

// channelRecord is a channel as stored.
type channelRecord struct {
	ID             string    `json:"id"`
	Calendar       string    `json:"calendar"`
	GoogleCalendar string    `json:"google_calendar"`
	Token          string    `json:"token"` // sealed for sealPlace(ID)
	ResourceID     string    `json:"resource_id,omitempty"`
	Expires        time.Time `json:"expires"`
	RenewAt        time.Time `json:"renew_at"`
}

// storeTimeout bounds one call to the channel store.
const storeTimeout = 5 * time.Second

// channelIDPattern is the shape of the channel ids bookline makes; other
// ids are not looked up in the store.
var channelIDPattern = regexp.MustCompile(`^bookline-[0-9a-f]{32}$`)

// sealPlace binds a sealed token to its channel.
func sealPlace(id string) string { return "google-channel:" + id }

// persistent reports whether channels are kept in the store.
func (s *Syncer) persistent() bool { return s.cfg.Channels != nil && s.cfg.Key != nil }

func (s *Syncer) saveChannel(ctx context.Context, ch *pushChannel) error {
	if !s.persistent() {
		return nil
	}
	tok, err := s.cfg.Key.Seal([]byte(ch.token), sealPlace(ch.id))
	if err != nil {
		return err
	}
	b, err := json.Marshal(channelRecord{ID: ch.id, Calendar: ch.cal, GoogleCalendar: ch.googleCal, Token: tok,
		ResourceID: ch.resourceID, Expires: ch.expires, RenewAt: ch.renewAt})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	return s.cfg.Channels.PutChannel(sctx, ch.id, b)
}

func (s *Syncer) deleteChannel(ctx context.Context, id string) {
	if !s.persistent() {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := s.cfg.Channels.DeleteChannel(sctx, id); err != nil {
		s.log.Warn("forgetting a google push channel in the store", "channel", id, "err", err)
	}
}

// openChannel reads a stored record.
func (s *Syncer) openChannel(id string, b []byte) (*pushChannel, error) {
	var r channelRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("calendarsync: push channel %s: %w", id, err)
	}
	if r.ID != id {
		return nil, fmt.Errorf("calendarsync: push channel %s: the record names %s", id, r.ID)
	}
	tok, err := s.cfg.Key.Open(r.Token, sealPlace(id))
	if err != nil {
		return nil, fmt.Errorf("calendarsync: push channel %s: %w", id, err)
	}
	return &pushChannel{cal: r.Calendar, googleCal: r.GoogleCalendar, id: id, token: string(tok), resourceID: r.ResourceID,
		expires: r.Expires, renewAt: r.RenewAt}, nil
}

// lookupChannel finds channel id in memory, else in the store (made before
// a restart, or by another instance).
func (s *Syncer) lookupChannel(id string) (*pushChannel, error) {
	s.mu.Lock()
	ch := s.chanByID[id]
	s.mu.Unlock()
	if ch != nil || !s.persistent() || !channelIDPattern.MatchString(id) {
		return ch, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	b, err := s.cfg.Channels.GetChannel(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("calendarsync: reading push channel %s: %w", id, err)
	}
	if b == nil {
		return nil, nil
	}
	if ch, err = s.openChannel(id, b); err != nil {
		s.log.Warn("a stored google push channel does not open", "channel", id, "err", err)
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if known := s.chanByID[id]; known != nil {
		return known, nil
	}
	s.chanByID[id] = ch
	return ch, nil
}

// loadChannels brings the channels in memory in line with the store and
// returns those this instance should stop: of a calendar it owns, all
// but the newest (a crash between a renewal's new channel and the old
// one's stop leaves two), and those that expired or were never confirmed
// by Google. false when the store could not be read.
func (s *Syncer) loadChannels(ctx context.Context) ([]*pushChannel, bool) {
	lctx, cancel := context.WithTimeout(ctx, storeTimeout)
	recs, err := s.cfg.Channels.ListChannels(lctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reading the google push channels", "err", err)
		}
		return nil, false
	}
	stored := map[string]*pushChannel{}
	for id, b := range recs {
		ch, err := s.openChannel(id, b)
		if err != nil {
			s.log.Warn("a stored google push channel does not open", "channel", id, "err", err)
			continue
		}
		stored[id] = ch
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.chanByID {
		if stored[id] == nil {
			delete(s.chanByID, id) // stopped by another instance
		}
	}
	byCal := map[string][]*pushChannel{}
	for id, ch := range stored {
		if known := s.chanByID[id]; known != nil {
			known.resourceID, known.expires, known.renewAt = ch.resourceID, ch.expires, ch.renewAt
			ch = known
		} else {
			s.chanByID[id] = ch
		}
		byCal[ch.cal] = append(byCal[ch.cal], ch)
	}
	var extra []*pushChannel
	for cal, chs := range byCal {
		if !s.cfg.owns(cal) {
			continue
		}
		slices.SortFunc(chs, func(a, b *pushChannel) int { return b.expires.Compare(a.expires) })
		var cur *pushChannel
		for _, ch := range chs {
			if cur == nil && ch.resourceID != "" && now.Before(ch.expires) {
				cur = ch
				continue
			}
			extra = append(extra, ch)
		}
		if cur != nil {
			s.chanByCal[cal] = cur
			s.linkLocked(cal).push = PushActive
		}
	}
	for cal, ch := range s.chanByCal {
		if !s.cfg.owns(cal) || s.chanByID[ch.id] == nil {
			// Another instance manages it now (or stopped it).
			delete(s.chanByCal, cal)
			if l := s.links[cal]; l != nil {
				l.push = ""
			}
		}
	}
	return extra, true
}
