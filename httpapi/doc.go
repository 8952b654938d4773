// Package httpapi is bookline's HTTP adapter: the Fiber routes of the
// booking API, request validation, API keys and rate limits, the mapping of
// decisions and errors to statuses, and the Prometheus registry.
//
// Writes never touch the index: a write becomes a command submitted to the
// log (Backend.Submit), and its answer is the writer's decided reply, so
// every retry of a request gets the same status and body. Reads go to the
// committed index (Backend.View), which shows only decisions whose commands
// are as durable as the log makes them. The one shortcut, a keyless booking that the committed index
// already refuses, is answered with the writer's own decision function
// (Refuser) and never accepts anything.
//
// The booking UI (ui.go, with the assets of package ui) is served from the
// binary: /book/{calendarId} and the <bookline-booking> component. It uses
// publishable keys, the one role meant for browsers: CORS (cors.go) is for
// them only, and their requests are rate limited per client address.
//
// Errors: one Error type with stable codes and one table from code to
// status (errors.go); only internal errors are logged, and their detail is
// never sent.
//
// Ports (ports.go): besides its Backend (submit, look up, read, readiness)
// the API gets each optional feature as an explicit field of
// Config.Ports, a small interface declared here (Refuser, Answerer,
// OutcomeReader, CalendarSyncer, DurabilityReporter, ClusterReporter,
// Snapshots, PartitionSkipper, the Google ports, Webhooks); it never looks
// for one by asserting its Backend. A nil port is a feature that is off,
// decided when the process is wired: its routes answer 404 not_enabled
// (503 unavailable stays for a feature that is on and cannot answer now),
// and the steps it would add to other requests are skipped.
// cmd/bookline/wire.go checks at compile time that what it passes
// implements each port.
//
// httpapi depends on actor and data (and docs, for the embedded OpenAPI
// file), on httpapi/webhook/endpoint (the NATS-free model of a webhook
// endpoint, which its Webhooks port speaks) and on the interfaces it
// declares. It imports no transport but Fiber: never queue, calendarsync,
// the webhook delivery adapter (httpapi/webhook) or NATS
// (TestImportBoundaries checks its whole dependency graph). A backend's
// errors are told apart by behaviour (backenderrors.go: UnavailableError,
// PendingError, ...), and the request id reaches the log through the
// Config.WithTraceID port.
package httpapi
