// Command importer is a minimal bookline importer to copy and adapt: it reads
// a CSV file (header: calendar_id,start,end,customer; times in RFC 3339),
// publishes one booking.create command per row straight to bookline's NATS
// command stream, waits for the outcomes and prints a summary.
//
// It talks to NATS with nats.go and takes two things from bookline: the
// command type (actor.Command, which validates and fingerprints a row) and
// queue.CommandMsg, which builds the message of the wire contract
// (docs/protocol.md) exactly as bookline's own producers do. Importing queue
// links what queue links (the embedded NATS server, bbolt); an importer that
// must stay small writes the same message itself from docs/protocol.md §4:
//
//	subject  bookline.cmd.<calendar_id>
//	headers  Bookline-Schema: 1, Content-Type: application/json,
//	         Bookline-Reply-To: <subject the outcome is published on>,
//	         Bookline-Request-Id: <request id>,
//	         Nats-Msg-Id: <calendar_id>:<request_id>:<fingerprint>, for
//	         JetStream's 30-second dedupe,
//	         Nats-Expected-Stream: BOOKLINE_CMD
//	body     {"v":1,"type":"booking.create","request_id":"...",
//	          "calendar_id":"...","booking":{"start":"...","end":"...","customer":"..."}}
//
// An importer that cannot use bookline's Go packages writes the same
// subject, headers and body itself.
//
// Run it against `bookline serve` (its embedded NATS listens on
// nats://127.0.0.1:4222):
//
//	go run ./examples/importer -file bookings.csv
//
// When bookline has API keys (or listens beyond loopback) its NATS server
// asks for credentials too; the importer's are printed by
// `bookline nats-credentials --role importer`:
//
//	bookline nats-credentials --role importer > importer.nk
//	go run ./examples/importer -file bookings.csv -nkey importer.nk
//
// Re-running the same file is safe: request ids are derived from each row's
// content, so bookline answers repeats with the first outcome instead of
// booking twice. (`bookline import` is the full-featured version.)
package main
