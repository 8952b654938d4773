package calendarsync

// Google Calendar (API v3) as a Provider: the only file of the Syncer that
// speaks Google's API (credentials are in creds.go). It maps the port's
// neutral events and errors to Google's and back, and makes exactly the
// calls the Syncer always made (client-chosen event ids, If-Match on
// patches, events.list with singleEvents and sync tokens, freebusy.query,
// events.watch and channels.stop).

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/api/calendar/v3"
	"google.golang.org/api/googleapi"

	"github.com/bookline/bookline/data"
)

// googleMaxPage is the largest page Google gives.
const googleMaxPage = 2500

// GoogleProvider is the ProviderFunc of Google Calendar clients made by
// svc (for example CredentialsFile).
func GoogleProvider(svc ServiceFunc) ProviderFunc {
	return func(ctx context.Context) (Provider, error) {
		s, err := svc(ctx)
		if err != nil {
			return nil, err
		}
		return NewGoogle(s), nil
	}
}

// NewGoogle is the Provider of a Google Calendar client.
func NewGoogle(svc *calendar.Service) Provider { return &googleProvider{svc: svc} }

type googleProvider struct{ svc *calendar.Service }

var _ Provider = (*googleProvider)(nil)

func (p *googleProvider) GetEvent(ctx context.Context, cal, id string) (*Event, error) {
	got, err := p.svc.Events.Get(cal, id).Context(ctx).Do()
	if err != nil {
		return nil, googleError(err)
	}
	return fromGoogle(got), nil
}

func (p *googleProvider) InsertEvent(ctx context.Context, cal string, ev *Event) (*Event, error) {
	got, err := p.svc.Events.Insert(cal, toGoogle(ev)).Context(ctx).Do()
	if err != nil {
		return nil, googleError(err)
	}
	return fromGoogle(got), nil
}

func (p *googleProvider) PatchEvent(ctx context.Context, cal string, ev *Event, ifMatch string) (*Event, error) {
	call := p.svc.Events.Patch(cal, ev.ID, toGoogle(ev)).Context(ctx)
	call.Header().Set("If-Match", ifMatch)
	got, err := call.Do()
	if err != nil {
		return nil, googleError(err)
	}
	return fromGoogle(got), nil
}

func (p *googleProvider) DeleteEvent(ctx context.Context, cal, id string) error {
	return googleError(p.svc.Events.Delete(cal, id).Context(ctx).Do())
}

func (p *googleProvider) CheckCalendar(ctx context.Context, cal string) error {
	_, err := p.svc.Events.List(cal).MaxResults(1).Context(ctx).Do()
	return googleError(err)
}

func (p *googleProvider) ListEvents(ctx context.Context, cal string, q ListQuery) (*EventPage, error) {
	max := q.Max
	if max <= 0 || max > googleMaxPage {
		max = googleMaxPage
	}
	call := p.svc.Events.List(cal).SingleEvents(true).MaxResults(int64(max))
	if q.SyncToken != "" {
		// timeMin/timeMax cannot go with a sync token.
		call = call.SyncToken(q.SyncToken)
	} else {
		call = call.TimeMin(q.Window.Start.UTC().Format(time.RFC3339)).TimeMax(q.Window.End.UTC().Format(time.RFC3339))
	}
	if q.PageToken != "" {
		call = call.PageToken(q.PageToken)
	}
	out, err := call.Context(ctx).Do()
	if err != nil {
		return nil, googleError(err)
	}
	page := &EventPage{NextPageToken: out.NextPageToken, NextSyncToken: out.NextSyncToken, TimeZone: out.TimeZone,
		Items: make([]*Event, 0, len(out.Items))}
	for _, it := range out.Items {
		if it != nil {
			page.Items = append(page.Items, fromGoogle(it))
		}
	}
	return page, nil
}

func (p *googleProvider) FreeBusy(ctx context.Context, cal string, iv data.Interval) ([]data.Interval, error) {
	out, err := p.svc.Freebusy.Query(&calendar.FreeBusyRequest{TimeMin: iv.Start.UTC().Format(time.RFC3339), TimeMax: iv.End.UTC().Format(time.RFC3339),
		Items: []*calendar.FreeBusyRequestItem{{Id: cal}}}).Context(ctx).Do()
	if err != nil {
		return nil, googleError(err)
	}
	fc, ok := out.Calendars[cal]
	if !ok || len(fc.Errors) > 0 {
		return nil, &freeBusyError{cal}
	}
	var busy []data.Interval
	for _, p := range fc.Busy {
		a, err1 := time.Parse(time.RFC3339, p.Start)
		b, err2 := time.Parse(time.RFC3339, p.End)
		if err1 == nil && err2 == nil && a.Before(b) {
			busy = append(busy, data.Interval{Start: a.UTC(), End: b.UTC()})
		}
	}
	return busy, nil
}

type freeBusyError struct{ g string }

func (e *freeBusyError) Error() string { return "calendarsync: free/busy has no answer for " + e.g }

func (p *googleProvider) Watch(ctx context.Context, cal string, w WatchRequest) (string, time.Time, error) {
	got, err := p.svc.Events.Watch(cal, &calendar.Channel{Id: w.ID, Type: "web_hook", Address: w.Address, Token: w.Token,
		Params: map[string]string{"ttl": strconv.Itoa(int(w.TTL / time.Second))}}).Context(ctx).Do()
	if err != nil {
		return "", time.Time{}, googleError(err)
	}
	var exp time.Time
	if got.Expiration > 0 {
		exp = time.UnixMilli(got.Expiration)
	}
	return got.ResourceId, exp, nil
}

func (p *googleProvider) StopWatch(ctx context.Context, id, resourceID string) error {
	return googleError(p.svc.Channels.Stop(&calendar.Channel{Id: id, ResourceId: resourceID}).Context(ctx).Do())
}

// googleError turns Google's answer into a *CallError (keeping its text);
// other errors (network, OAuth2 token refresh) pass unchanged.
func googleError(err error) error {
	var ge *googleapi.Error
	if err == nil || !errors.As(err, &ge) {
		return err
	}
	ce := &CallError{Status: ge.Code, Reason: googleReason(ge), Err: err}
	if ge.Header != nil {
		if secs, perr := strconv.Atoi(ge.Header.Get("Retry-After")); perr == nil && secs > 0 {
			ce.RetryAfter = time.Duration(secs) * time.Second
		}
	}
	return ce
}

func googleReason(e *googleapi.Error) string {
	for _, it := range e.Errors {
		if it.Reason != "" {
			return it.Reason
		}
	}
	return ""
}

// EventFor is the Google event mirroring booking bk on link: MirrorEvent
// in Google's form.
func EventFor(bk *data.Booking, link *data.ExternalLink) *calendar.Event {
	return toGoogle(MirrorEvent(bk, link))
}

// toGoogle is the Google form of a mirrored event: times in UTC, the
// booking named in private extended properties.
func toGoogle(ev *Event) *calendar.Event {
	g := &calendar.Event{Id: ev.ID, Summary: ev.Summary, Description: ev.Description, Status: ev.Status,
		Visibility: ev.Visibility, Transparency: "opaque", Start: toGoogleTime(ev.Start), End: toGoogleTime(ev.End)}
	if ev.Transparent {
		g.Transparency = "transparent"
	}
	if ev.BookingID != "" || ev.BookingCalendar != "" {
		g.ExtendedProperties = &calendar.EventExtendedProperties{Private: map[string]string{
			PropBookingID: ev.BookingID, PropCalendarID: ev.BookingCalendar}}
	}
	return g
}

func toGoogleTime(t EventTime) *calendar.EventDateTime {
	switch {
	case !t.At.IsZero():
		return &calendar.EventDateTime{DateTime: t.At.UTC().Format(time.RFC3339), TimeZone: "UTC"}
	case t.Date != "":
		return &calendar.EventDateTime{Date: t.Date}
	}
	return nil
}

// fromGoogle reads a Google event; its eventType becomes a kind of the
// busy policy, an attendee "self" who declined becomes Declined.
func fromGoogle(g *calendar.Event) *Event {
	ev := &Event{ID: g.Id, Etag: g.Etag, Summary: g.Summary, Description: g.Description, Status: g.Status,
		Transparent: g.Transparency == "transparent", Visibility: g.Visibility,
		Start: fromGoogleTime(g.Start), End: fromGoogleTime(g.End)}
	switch g.EventType {
	case "workingLocation", "birthday":
		ev.Kind = KindInfo
	case "outOfOffice", "focusTime":
		ev.Kind = KindAbsence
	}
	for _, a := range g.Attendees {
		if a != nil && a.Self && a.ResponseStatus == "declined" {
			ev.Declined = true
		}
	}
	if g.ExtendedProperties != nil {
		ev.BookingID = g.ExtendedProperties.Private[PropBookingID]
		ev.BookingCalendar = g.ExtendedProperties.Private[PropCalendarID]
	}
	return ev
}

// fromGoogleTime reads a Google event time: a dateTime (RFC 3339) or, for
// all-day events, a date; one that does not parse is left empty.
func fromGoogleTime(d *calendar.EventDateTime) EventTime {
	if d == nil {
		return EventTime{}
	}
	if d.DateTime != "" {
		t, err := time.Parse(time.RFC3339, d.DateTime)
		if err != nil {
			return EventTime{}
		}
		return EventTime{At: t}
	}
	return EventTime{Date: d.Date}
}
