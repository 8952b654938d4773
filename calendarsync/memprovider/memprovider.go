// Package memprovider is an external calendar service held in memory: a
// calendarsync.Provider with the semantics the Syncer relies on
// (client-chosen ids and 409 duplicates, deletes that keep a cancelled
// event, etags and 412 on a stale If-Match, sync tokens and 410, free/busy,
// push channels), and no network. Tests run the Syncer against it as well
// as against the Google fake (calendarsync/googletest); it is also the
// smallest example of a provider: a new one (CalDAV, Microsoft Graph) is
// a package like this one, wired through calendarsync.Config.Provider.
//
// It is safe for concurrent use. Nothing in it is persisted.
package memprovider

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/data"
)

// DefaultPageSize is the page size of ListEvents when the query asks for
// none.
const DefaultPageSize = 250

// Provider is the in-memory calendar service.
type Provider struct {
	mu       sync.Mutex
	cals     map[string]*memCalendar
	version  uint64 // bumped by every change of any event
	pageSize int
	channels map[string]Channel
	faults   map[string][]*calendarsync.CallError
	calls    map[string]int
}

type memCalendar struct {
	tz     string
	events map[string]*stored
}

type stored struct {
	ev      calendarsync.Event
	version uint64 // Provider.version when it last changed
	// userDeleted: deleted by the calendar's owner (Delete), not through
	// the API: a later patch answers 403, as Google does.
	userDeleted bool
}

// Channel is a push channel the provider was asked for.
type Channel struct {
	Calendar   string
	ResourceID string
	calendarsync.WatchRequest
}

var _ calendarsync.Provider = (*Provider)(nil)

// New returns an empty provider.
func New() *Provider {
	return &Provider{cals: map[string]*memCalendar{}, channels: map[string]Channel{},
		faults: map[string][]*calendarsync.CallError{}, calls: map[string]int{}, pageSize: DefaultPageSize}
}

// Func is the provider as calendarsync.Config.Provider.
func (p *Provider) Func() calendarsync.ProviderFunc {
	return func(context.Context) (calendarsync.Provider, error) { return p, nil }
}

// AddCalendar creates calendar id (time zone tz, for all-day events), or
// brings back one removed with its events.
func (p *Provider) AddCalendar(id, tz string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.cals[id]; c != nil {
		c.tz = tz
		return
	}
	p.cals[id] = &memCalendar{tz: tz, events: map[string]*stored{}}
}

// SetPageSize caps every page of ListEvents at n events.
func (p *Provider) SetPageSize(n int) {
	p.mu.Lock()
	p.pageSize = n
	p.mu.Unlock()
}

// Fail makes the next call of method (the Provider method's name, e.g.
// "InsertEvent") answer status with reason, once per call of Fail.
func (p *Provider) Fail(method string, status int, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[method] = append(p.faults[method], apiError(status, reason, "injected"))
}

// Calls is how often method was called.
func (p *Provider) Calls(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method]
}

// Events returns a copy of calendar id's events (cancelled ones too), by
// id.
func (p *Provider) Events(id string) map[string]calendarsync.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]calendarsync.Event{}
	if c := p.cals[id]; c != nil {
		for k, st := range c.events {
			out[k] = st.ev
		}
	}
	return out
}

// Put writes ev into calendar cal as its owner would (an event made or
// changed by hand), and returns its new etag. The calendar must exist.
func (p *Provider) Put(cal string, ev calendarsync.Event) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ev.Status == "" {
		ev.Status = calendarsync.EventConfirmed
	}
	return p.storeLocked(p.cals[cal], ev).ev.Etag
}

// Delete deletes event id of calendar cal as its owner would: it stays,
// cancelled, and the API can no longer change it (403).
func (p *Provider) Delete(cal, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.cals[cal]
	if st := c.events[id]; st != nil {
		ev := st.ev
		ev.Status = calendarsync.EventCancelled
		p.storeLocked(c, ev).userDeleted = true
	}
}

// Channels returns the live push channels of calendar cal.
func (p *Provider) Channels(cal string) []Channel {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Channel
	for _, ch := range p.channels {
		if ch.Calendar == cal {
			out = append(out, ch)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (p *Provider) storeLocked(c *memCalendar, ev calendarsync.Event) *stored {
	p.version++
	ev.Etag = `"` + strconv.FormatUint(p.version, 10) + `"`
	st := &stored{ev: ev, version: p.version}
	c.events[ev.ID] = st
	return st
}

func apiError(status int, reason, msg string) *calendarsync.CallError {
	return &calendarsync.CallError{Status: status, Reason: reason,
		Err: fmt.Errorf("memprovider: %d %s: %s", status, reason, msg)}
}

// begin counts a call of method, takes the lock, and returns the fault to
// answer or the calendar (nil with a 404 when it does not exist).
func (p *Provider) begin(ctx context.Context, method, cal string) (*memCalendar, error) {
	p.mu.Lock()
	p.calls[method]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if fs := p.faults[method]; len(fs) > 0 {
		p.faults[method] = fs[1:]
		return nil, fs[0]
	}
	c := p.cals[cal]
	if c == nil && cal != "" {
		return nil, apiError(http.StatusNotFound, "notFound", "calendar not found")
	}
	return c, nil
}

func (p *Provider) GetEvent(ctx context.Context, cal, id string) (*calendarsync.Event, error) {
	c, err := p.begin(ctx, "GetEvent", cal)
	defer p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	st := c.events[id]
	if st == nil {
		return nil, apiError(http.StatusNotFound, "notFound", "event not found")
	}
	ev := st.ev
	return &ev, nil
}

func (p *Provider) InsertEvent(ctx context.Context, cal string, ev *calendarsync.Event) (*calendarsync.Event, error) {
	c, err := p.begin(ctx, "InsertEvent", cal)
	defer p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	switch {
	case ev.ID == "":
		return nil, apiError(http.StatusBadRequest, "invalid", "an event id is required")
	case c.events[ev.ID] != nil:
		// Deleted events keep their id.
		return nil, apiError(http.StatusConflict, "duplicate", "The requested identifier already exists.")
	case ev.Start == (calendarsync.EventTime{}) || ev.End == (calendarsync.EventTime{}):
		return nil, apiError(http.StatusBadRequest, "required", "Missing start or end.")
	}
	in := *ev
	if in.Status == "" {
		in.Status = calendarsync.EventConfirmed
	}
	out := p.storeLocked(c, in).ev
	return &out, nil
}

func (p *Provider) PatchEvent(ctx context.Context, cal string, ev *calendarsync.Event, ifMatch string) (*calendarsync.Event, error) {
	c, err := p.begin(ctx, "PatchEvent", cal)
	defer p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	st := c.events[ev.ID]
	switch {
	case st == nil:
		return nil, apiError(http.StatusNotFound, "notFound", "event not found")
	case ifMatch != "" && ifMatch != st.ev.Etag:
		return nil, apiError(http.StatusPreconditionFailed, "conditionNotMet", "Precondition Failed")
	case st.userDeleted:
		return nil, apiError(http.StatusForbidden, "forbidden", "Forbidden")
	}
	m := st.ev
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&m.Summary, ev.Summary)
	set(&m.Description, ev.Description)
	set(&m.Status, ev.Status)
	set(&m.Visibility, ev.Visibility)
	set(&m.BookingID, ev.BookingID)
	set(&m.BookingCalendar, ev.BookingCalendar)
	if ev.Start != (calendarsync.EventTime{}) {
		m.Start = ev.Start
	}
	if ev.End != (calendarsync.EventTime{}) {
		m.End = ev.End
	}
	m.Transparent = ev.Transparent
	out := p.storeLocked(c, m).ev
	return &out, nil
}

func (p *Provider) DeleteEvent(ctx context.Context, cal, id string) error {
	c, err := p.begin(ctx, "DeleteEvent", cal)
	defer p.mu.Unlock()
	if err != nil {
		return err
	}
	st := c.events[id]
	switch {
	case st == nil:
		return apiError(http.StatusNotFound, "notFound", "event not found")
	case st.ev.Status == calendarsync.EventCancelled:
		return apiError(http.StatusGone, "deleted", "Resource has been deleted")
	}
	ev := st.ev
	ev.Status = calendarsync.EventCancelled
	p.storeLocked(c, ev)
	return nil
}

func (p *Provider) CheckCalendar(ctx context.Context, cal string) error {
	_, err := p.begin(ctx, "CheckCalendar", cal)
	p.mu.Unlock()
	return err
}

// ListEvents: a full read lists the live events overlapping the window; a
// read with a sync token lists every event changed since (cancelled ones
// too). Tokens are versions of the provider; one from the future or not a
// token answers 410. Pages are in event id order.
func (p *Provider) ListEvents(ctx context.Context, cal string, q calendarsync.ListQuery) (*calendarsync.EventPage, error) {
	c, err := p.begin(ctx, "ListEvents", cal)
	defer p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var since uint64
	if q.SyncToken != "" {
		v, ok := strings.CutPrefix(q.SyncToken, "v")
		n, perr := strconv.ParseUint(v, 10, 64)
		if !ok || perr != nil || n > p.version {
			return nil, apiError(http.StatusGone, "fullSyncRequired", "Sync token is no longer valid, a full sync is required.")
		}
		since = n
	}
	var items []*calendarsync.Event
	for _, st := range c.events {
		ev := st.ev
		if q.SyncToken != "" {
			if st.version <= since {
				continue
			}
		} else if ev.Status == calendarsync.EventCancelled || !overlaps(&ev, c.tz, q.Window) {
			continue
		}
		items = append(items, &ev)
	}
	sort.Slice(items, func(i, j int) bool { return items[i].ID < items[j].ID })
	from := 0
	if q.PageToken != "" {
		if from, err = strconv.Atoi(q.PageToken); err != nil || from < 0 || from > len(items) {
			return nil, apiError(http.StatusBadRequest, "invalid", "bad page token")
		}
	}
	size := p.pageSize
	if q.Max > 0 && q.Max < size {
		size = q.Max
	}
	page := &calendarsync.EventPage{TimeZone: c.tz}
	to := min(len(items), from+size)
	page.Items = items[from:to]
	if to < len(items) {
		page.NextPageToken = strconv.Itoa(to)
	} else {
		page.NextSyncToken = "v" + strconv.FormatUint(p.version, 10)
	}
	return page, nil
}

// FreeBusy answers the busy periods of the calendar's live events that
// make it busy (opaque or absences, not declined), clipped to iv.
func (p *Provider) FreeBusy(ctx context.Context, cal string, iv data.Interval) ([]data.Interval, error) {
	c, err := p.begin(ctx, "FreeBusy", cal)
	defer p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var out []data.Interval
	for _, st := range c.events {
		ev := st.ev
		if ev.Status == calendarsync.EventCancelled || ev.Kind == calendarsync.KindInfo ||
			ev.Kind != calendarsync.KindAbsence && (ev.Transparent || ev.Declined) {
			continue
		}
		b, ok := span(&ev, c.tz)
		if !ok || !b.Overlaps(iv) {
			continue
		}
		if b.Start.Before(iv.Start) {
			b.Start = iv.Start
		}
		if b.End.After(iv.End) {
			b.End = iv.End
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

func (p *Provider) Watch(ctx context.Context, cal string, w calendarsync.WatchRequest) (string, time.Time, error) {
	_, err := p.begin(ctx, "Watch", cal)
	defer p.mu.Unlock()
	if err != nil {
		return "", time.Time{}, err
	}
	ch := Channel{Calendar: cal, ResourceID: "res-" + cal, WatchRequest: w}
	p.channels[w.ID] = ch
	return ch.ResourceID, time.Time{}, nil
}

func (p *Provider) StopWatch(ctx context.Context, id, resourceID string) error {
	_, err := p.begin(ctx, "StopWatch", "")
	defer p.mu.Unlock()
	if err != nil {
		return err
	}
	if ch, ok := p.channels[id]; !ok || ch.ResourceID != resourceID {
		return apiError(http.StatusNotFound, "notFound", "channel not found")
	}
	delete(p.channels, id)
	return nil
}

// span is an event's interval; all-day dates are days of zone tz.
func span(ev *calendarsync.Event, tz string) (data.Interval, bool) {
	loc, err := zones.Load(tz)
	if tz == "" || err != nil {
		loc = time.UTC
	}
	at := func(t calendarsync.EventTime) (time.Time, bool) {
		if !t.At.IsZero() {
			return t.At, true
		}
		d, err := time.ParseInLocation(time.DateOnly, t.Date, loc)
		return d, err == nil
	}
	s, ok1 := at(ev.Start)
	e, ok2 := at(ev.End)
	return data.Interval{Start: s.UTC(), End: e.UTC()}, ok1 && ok2 && s.Before(e)
}

func overlaps(ev *calendarsync.Event, tz string, w data.Interval) bool {
	iv, ok := span(ev, tz)
	return ok && iv.Overlaps(w)
}
