package webhook

import (
	"slices"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/httpapi/webhook/endpoint"
)

// Webhook event types, derived from an outcome event's command type and
// outcome (see EventType).
const (
	EventCalendarCreated    = "calendar.created"
	EventCalendarUpdated    = "calendar.updated"
	EventBookingConfirmed   = "booking.confirmed"
	EventBookingCancelled   = "booking.cancelled"
	EventBookingRescheduled = "booking.rescheduled"
	EventHoldCreated        = "hold.created"
	EventHoldReleased       = "hold.released"
	EventHoldExpired        = "hold.expired"
	EventBusySet            = "busy.set"
	EventBusyCleared        = "busy.cleared"
	EventCommandRejected    = "command.rejected"
	// EventCommandAccepted is an accepted command of a type this build does
	// not map (a newer writer's).
	EventCommandAccepted = "command.accepted"
)

// EventTypes are the types an endpoint may subscribe to.
var EventTypes = []string{
	EventCalendarCreated, EventCalendarUpdated, EventBookingConfirmed, EventBookingCancelled,
	EventBookingRescheduled, EventHoldCreated, EventHoldReleased, EventHoldExpired,
	EventBusySet, EventBusyCleared, EventCommandRejected, EventCommandAccepted,
}

// EventType maps an outcome event (docs/protocol.md §7) to its webhook
// type. A confirmed hold becomes booking.confirmed, like a direct booking:
// from then on it is one (the payload's type, hold.confirm, tells them
// apart).
func EventType(payload []byte) string {
	// The payload is a reply, read by its one codec (actor.ReadReply).
	var o actor.ReplyView
	if err := actor.ReadReply(payload, &o); err != nil {
		return EventCommandRejected
	}
	if o.Outcome != "accepted" {
		return EventCommandRejected
	}
	switch o.Type {
	case "calendar.upsert":
		if o.Created {
			return EventCalendarCreated
		}
		return EventCalendarUpdated
	case "booking.create", "hold.confirm", actor.TypeCollectiveCommit:
		// A collective's part becomes a booking when its member commits
		// it: each member's part is delivered as that calendar's, with
		// the collective's id and calendar_ids.
		return EventBookingConfirmed
	case "booking.cancel", actor.TypeCollectiveCancel:
		return EventBookingCancelled
	case "booking.reschedule", actor.TypeCollectiveMoveCommit:
		// A member's applied move is that calendar's reschedule of its
		// part, with the collective's id and calendar_ids.
		return EventBookingRescheduled
	case "hold.create":
		return EventHoldCreated
	case "hold.release":
		return EventHoldReleased
	case "hold.expire":
		return EventHoldExpired
	case "busy.set":
		return EventBusySet
	case "busy.clear":
		return EventBusyCleared
	}
	return EventCommandAccepted
}

// signingSecrets are the secrets of ep that sign at now, newest first.
func signingSecrets(ep *endpoint.Endpoint, now time.Time) []string {
	var out []string
	for _, s := range ep.Secrets {
		if s.ExpiresAt == nil || now.Before(*s.ExpiresAt) {
			out = append(out, s.Value)
		}
	}
	return out
}

// wants reports whether ep subscribes to webhook type typ.
func wants(ep *endpoint.Endpoint, typ string) bool {
	return len(ep.Events) == 0 || slices.Contains(ep.Events, typ)
}
