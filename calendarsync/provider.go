package calendarsync

// The calendar-provider port: the calls the Syncer makes to an external
// calendar, in its own terms. The Syncer's logic (mirror order, etags,
// dead letters, busy policy, push channels) knows only this interface; a
// provider (Google in google.go, the in-memory one in
// calendarsync/memprovider) maps it to its API. A new provider (CalDAV,
// Microsoft Graph) is a new implementation wired through Config.Provider.

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/bookline/bookline/data"
)

// Provider is an external calendar service. cal is always the external
// calendar's id (data.ExternalLink.CalendarID). Errors that the service
// answered are *CallError, so that the Syncer can tell a conflict from a
// transient failure; anything else is treated as a network failure (or,
// wrapping ErrCredentials, as missing credentials).
//
// The semantics the Syncer relies on, which every provider keeps:
//   - event ids are chosen by the client (the booking id); inserting an id
//     that exists, even a cancelled event, answers 409;
//   - a delete keeps the event with status cancelled (a later insert of
//     its id answers 409; a patch with a status restores it);
//   - every returned event carries an etag that changes on each write, and
//     a patch with a non-empty ifMatch that differs answers 412;
//   - 404 for a missing event or calendar, 410 for a sync token the
//     provider no longer knows (the Syncer then reads everything).
type Provider interface {
	GetEvent(ctx context.Context, cal, id string) (*Event, error)
	InsertEvent(ctx context.Context, cal string, ev *Event) (*Event, error)
	// PatchEvent writes ev's non-zero fields (an empty Status leaves the
	// status alone), on the condition that the event's etag is ifMatch.
	PatchEvent(ctx context.Context, cal string, ev *Event, ifMatch string) (*Event, error)
	DeleteEvent(ctx context.Context, cal, id string) error
	// CheckCalendar answers nil when calendar cal exists and is readable.
	CheckCalendar(ctx context.Context, cal string) error
	// ListEvents reads one page of events, recurring events expanded into
	// their instances.
	ListEvents(ctx context.Context, cal string, q ListQuery) (*EventPage, error)
	// FreeBusy reads the busy periods of calendar cal over iv.
	FreeBusy(ctx context.Context, cal string, iv data.Interval) ([]data.Interval, error)
	// Watch opens a push channel: changes of cal are posted to w.Address
	// with w.ID and w.Token. It returns the provider's resource id of the
	// channel (needed to stop it) and its expiry (zero: as asked).
	Watch(ctx context.Context, cal string, w WatchRequest) (resourceID string, expires time.Time, err error)
	// StopWatch stops a channel made by Watch.
	StopWatch(ctx context.Context, id, resourceID string) error
}

// ProviderFunc returns the provider. The Syncer calls it again after an
// authorization failure, so an implementation that reads its credentials
// from a file picks up fixed credentials.
type ProviderFunc func(ctx context.Context) (Provider, error)

// Event statuses.
const (
	EventConfirmed = "confirmed"
	EventCancelled = "cancelled"
)

// EventKind says what an event is beyond its time, for the busy policy
// (busyEvent).
type EventKind int

const (
	// KindEvent is an ordinary event: busy unless transparent or
	// declined.
	KindEvent EventKind = iota
	// KindInfo says where or what, not that the time is taken (Google's
	// workingLocation and birthday): never busy.
	KindInfo
	// KindAbsence takes the time whatever its transparency (Google's
	// outOfOffice and focusTime): always busy.
	KindAbsence
)

// EventTime is a timed instant (At) or, for all-day events, a date
// (YYYY-MM-DD) of the external calendar's time zone. Neither set means the
// provider gave a time that could not be read.
type EventTime struct {
	At   time.Time
	Date string
}

// Event is an external calendar event as the Syncer sees it.
type Event struct {
	ID, Etag             string
	Summary, Description string
	Start, End           EventTime
	// Status is EventConfirmed, EventCancelled or, in a patch, empty
	// (unchanged).
	Status string
	// Transparent: the event does not make its owner busy.
	Transparent bool
	// Visibility as the link asks for it ("private", "default", "public",
	// "confidential"); empty is "default".
	Visibility string
	Kind       EventKind
	// Declined: the calendar's owner declined the invitation.
	Declined bool
	// BookingID and BookingCalendar are kept with bookline's mirrors (a
	// private extended property in Google): which booking of which
	// bookline calendar the event mirrors.
	BookingID, BookingCalendar string
}

// ListQuery selects a page of ListEvents: the changes since SyncToken when
// it is set, else every event overlapping Window; PageToken continues a
// read. Max is the page size asked for (0: the provider's).
type ListQuery struct {
	SyncToken, PageToken string
	Window               data.Interval
	Max                  int
}

// EventPage is one page of ListEvents. NextSyncToken is set on the last
// page; TimeZone, when known, is the calendar's (all-day dates are days
// there).
type EventPage struct {
	Items                        []*Event
	NextPageToken, NextSyncToken string
	TimeZone                     string
}

// WatchRequest is a push channel asked for.
type WatchRequest struct {
	ID, Token, Address string
	TTL                time.Duration
}

// CallError is a provider's answer to a call that failed: Status is its
// HTTP-like status code (404, 409, 410, 412, 429, 5xx...), Reason the
// provider's reason when it gives one (Google's errors[].reason:
// "rateLimitExceeded", "quotaExceeded"...), RetryAfter the wait it asked
// for. Err is the provider's own error, whose text is shown.
type CallError struct {
	Status     int
	Reason     string
	RetryAfter time.Duration
	Err        error
}

func (e *CallError) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return "calendar provider: status " + strconv.Itoa(e.Status) + " " + e.Reason
}

func (e *CallError) Unwrap() error { return e.Err }

// callError finds the provider's answer in err.
func callError(err error) (*CallError, bool) {
	var ce *CallError
	ok := errors.As(err, &ce)
	return ce, ok
}

func isCallError(err error) bool { _, ok := callError(err); return ok }
