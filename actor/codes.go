package actor

// Stable rejection codes: every code a reply can carry. They are part of
// the wire contract (replies, request records, events: docs/protocol.md and
// docs/schema list them, and a test keeps those lists equal to these) and of
// the HTTP API (httpapi maps each to a status); never rename one.
const (
	CodeInvalidCommand       = "invalid_command" // undecodable, unknown type, wrong subject
	CodeInvalidRequest       = "invalid_request" // decodable but a field is invalid
	CodeCalendarNotFound     = "calendar_not_found"
	CodeBookingNotFound      = "booking_not_found"
	CodeSlotTaken            = "slot_taken"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeHoldNotFound         = "hold_not_found"
	CodeHoldExpired          = "hold_expired"
	CodeHoldConfirmed        = "hold_confirmed"
	CodeBookingNotConfirmed  = "booking_not_confirmed"
	// CodeExternalBusy: the interval overlaps time that is busy outside
	// bookline (a busy block imported from a linked external calendar).
	CodeExternalBusy = "external_busy"
	// CodeCommandSkipped answers a command that stopped its partition and
	// that an operator skipped (partition.skip): it was not decided.
	CodeCommandSkipped = "command_skipped"
	// CodeNotStopped refuses a partition.skip whose command was not
	// skipped by it: the partition did not stop there (or another skip
	// came first).
	CodeNotStopped = "not_stopped"

	// Calendar rules (HTTP 422; a full slot stays slot_taken, 409).
	CodeOutsideHours       = "outside_hours"
	CodeMisaligned         = "misaligned"
	CodeDurationNotAllowed = "duration_not_allowed"
	CodeTooSoon            = "too_soon"
	CodeTooFar             = "too_far"
	CodeBufferConflict     = "buffer_conflict"
)
