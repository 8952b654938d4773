package data

import (
	"errors"
	"time"
)

// The live state of a calendar's external link, as the calendar sync
// reports it and the API shows it (as "google", the link's wire name). It
// is not stored in the index: it is what the running process knows of its
// calls to the provider.

// LinkStatus is what GET /v1/calendars/{id} shows of a link.
type LinkStatus struct {
	CalendarID string `json:"calendar_id"`
	SyncBusy   bool   `json:"sync_busy"`
	// Status is "ok", "degraded" (the link needs fixing) or "throttled"
	// (the provider's usage quota is spent until ThrottledUntil), with Reason.
	Status         string     `json:"status"`
	Reason         string     `json:"reason,omitempty"`
	ThrottledUntil *time.Time `json:"throttled_until,omitempty"`
	// DeadLetters counts the mirror operations set aside after the provider
	// refused them repeatedly (see the admin dead-letter routes).
	DeadLetters int `json:"dead_letters"`
	// Pending is the number of mirror operations not yet in the external calendar
	// (counted up to 10000).
	Pending int `json:"pending"`
	// Push is the state of the push channel: "active", "polling" (the
	// watch failed) or absent (no webhook URL configured).
	Push     string     `json:"push,omitempty"`
	LastSync *time.Time `json:"last_sync"`
	// Failures counts failed provider calls since start, by reason.
	Failures map[string]uint64 `json:"failures,omitempty"`
}

// BusySyncResult is what one read of a calendar's busy time did.
type BusySyncResult struct {
	Full    bool `json:"full"`
	Events  int  `json:"events"`
	Set     int  `json:"set"`
	Cleared int  `json:"cleared"`
}

// Errors of reading a calendar's busy time on demand.
var (
	ErrNotLinked     = errors.New("calendar is not linked to an external calendar")
	ErrNoCredentials = errors.New("no calendar provider credentials configured")
)

// Errors of a provider's push notification.
var (
	ErrUnknownChannel = errors.New("unknown notification channel")
	ErrChannelToken   = errors.New("wrong notification channel token")
)

// BeyondBusyWindowError: a booking reaches past the span whose busy time
// is read from the external calendar, so it cannot be checked against it.
type BeyondBusyWindowError struct{ Until time.Time }

func (e *BeyondBusyWindowError) Error() string {
	return "busy time is read from the external calendar up to " + e.Until.UTC().Format(time.RFC3339) + " only"
}
