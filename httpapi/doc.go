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
// httpapi depends on actor and data (and docs, for the embedded OpenAPI
// file) and on the small interfaces it
// declares (Backend, Refuser, GoogleSync, CalendarSyncer, OutcomeReader, Answerer,
// NodeSampler); it never imports queue or calendarsync: cmd/bookline wires
// them to it. A backend's errors are told apart by behaviour
// (backenderrors.go: UnavailableError, PendingError, ...), and the request
// id reaches the log through the Config.WithTraceID port.
package httpapi
