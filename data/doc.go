// Package data is bookline's model (calendars, bookings, holds, busy
// blocks, request records) and the bbolt index that holds it.
//
// The index is derived from the command log: every change of the decided
// state is made by a partition writer deciding a command (actor), inside one
// group-committed read-write transaction (Store.Commit), together with the
// partition's applied sequence, so a redelivered message is skipped and a
// crash loses nothing that the log does not still hold. Besides the writers
// only bookkeeping outside the digest is written directly: published events
// and mirrored external calendar operations leave their outboxes, and the index notes
// the time zone data it was decided with.
//
// Invariants (data/datatest.CheckInvariants checks them after tests):
//
//   - At no instant do more intervals that count (confirmed bookings, live
//     holds) overlap than the calendar's capacity, nor more buffered spans.
//   - Every booking or hold has exactly one slot entry with its times, and
//     every slot entry a record; held records are in the hold expiry index.
//   - A request record with a retention is in the request expiry index.
//   - The digest covers the decided state and nothing that depends on when
//     side effects ran (the event and calendar sync outboxes) or on the file's
//     history.
//
// Caveats: one read-write transaction at a time for the whole file, so all
// writes go through the one commit loop; byte slices read in a transaction
// are valid only inside it; with Options.NoSync a commit is in the OS's
// page cache only, and the session file makes a power loss discard the
// index (it is rebuilt from the log).
//
// data knows nothing of NATS, HTTP or any calendar provider's API: a link
// is to an external calendar (ExternalLink), whichever calendarsync
// provider serves it, and linkstatus.go holds only what the API shows of
// it. The link's wire and storage name stays "google" (Calendar.Link), so
// existing indexes and streams read unchanged. It imports none of
// bookline's other packages.
package data
