package httpapi

// Ports are the API's optional features: each a small interface declared
// in this package, given explicitly when the process is wired
// (cmd/bookline/wire.go checks at compile time that what it passes
// implements each one). The API never looks for a feature by asserting
// its Backend.
//
// A nil port means the feature is off in this process, which is decided
// at wiring, not found out per request:
//
//   - a route that exists only for the feature answers 404 not_enabled
//     (cluster status, snapshots, skip, the Google routes, the webhooks);
//     503 unavailable stays for a feature that is on but cannot answer
//     now;
//   - a step that a request may take on the way (answering a refusal from
//     the index, an earlier record of the same request, catching up with
//     the log before a read, Google's free/busy check, a calendar's Google
//     status, the durability check of /readyz) is skipped, and the request
//     is served as it would be without it.
type Ports struct {
	// Refuser answers a booking or hold without an Idempotency-Key from
	// the committed index when the index already refuses it.
	Refuser Refuser
	// Answerer answers a keyed request from the record its key got before
	// keys were scoped to callers.
	Answerer Answerer
	// Outcomes tells a request that may still be decided from one that
	// never will be (GET …/requests/{id}); nil: the record alone answers.
	Outcomes OutcomeReader
	// CalendarSync brings the index up to a calendar's last logged
	// command before a read (cluster mode).
	CalendarSync CalendarSyncer
	// Durability says whether answered commands may be lost to a power
	// cut of the NATS servers (/readyz's nats_durability).
	Durability DurabilityReporter
	// Cluster serves GET /v1/admin/cluster.
	Cluster ClusterReporter
	// Snapshots serves GET and POST /v1/admin/snapshots.
	Snapshots Snapshots
	// Skipper serves POST /v1/admin/partitions/{partition}/skip.
	Skipper PartitionSkipper
	// Google shows a linked calendar's sync status and serves POST
	// /v1/admin/calendars/{id}/google/sync.
	Google GoogleSync
	// GoogleCheck looks at a booking, hold or reschedule in Google's
	// free/busy before it is sent.
	GoogleCheck GoogleBookingChecker
	// DeadLetters serves /v1/admin/calendars/{id}/google/dead-letters.
	DeadLetters GoogleDeadLetters
	// GoogleNotifications serves POST /v1/google/notifications.
	GoogleNotifications GoogleNotifier
	// Webhooks serves /v1/webhooks.
	Webhooks Webhooks
	// Partitions gathers the commits of vote-decided collective bookings
	// into one collective.commits per partition (commitbatch.go); nil:
	// each member's commit is a command of its own.
	Partitions PartitionCounter
	// Versions says whether every instance decides a schema version: a
	// collective is decided by its votes only then (nil: this instance
	// alone, which does).
	Versions SchemaGate
}

// SchemaGate tells whether every instance of the cluster decides schema
// version v (queue.Node.EveryInstanceDecides).
type SchemaGate interface {
	EveryInstanceDecides(v int) bool
}

// CodeNotEnabled: the route belongs to a feature that is off in this
// process (its port was not wired); asking again will not help.
const CodeNotEnabled = "not_enabled"

// notEnabled is the answer of a route whose feature is off.
func notEnabled(feature string) *Error {
	return &Error{Code: CodeNotEnabled, Message: feature + ": not enabled in this process"}
}
