// Package calendarsync connects bookline calendars to an external calendar
// service, in both directions, without ever putting it on a booking's
// path. The Syncer speaks to the service through one port, Provider
// (provider.go): client-chosen event ids, conditional patches, sync-token
// listing, free/busy and push channels, with errors as *CallError. Google
// Calendar is one implementation (google.go, its credentials in creds.go:
// the only files that import Google's API; Config.Service wires it); the
// in-memory calendarsync/memprovider is another, and the tests run the
// mirror and the busy import on both. A new provider (CalDAV, Microsoft
// Graph) is a new package implementing Provider, wired through
// Config.Provider. What follows describes the Syncer with Google, whose
// semantics every provider keeps.
//
// Mirror (bookline -> Google): the partition writer queues one sync
// operation per change of a confirmed booking of a linked calendar in the
// transaction that decides it (data.SyncEntry, bucket "gsync"). A Syncer
// drains that outbox per calendar, in sequence order, with idempotent
// calls: the Google event id is the booking id (26 characters of base32hex,
// a valid client-chosen event id), so a retried insert answers 409
// duplicate instead of creating a second event. Every patch is
// conditional: it carries If-Match with the event's etag as the mirror
// last saw it (kept in memory; the event is read first when it is not
// known, and an event that already is what the operation wants is not
// written), so a patch that Google applies late, after its call timed out
// here, meets a newer etag and is refused (412) instead of overwriting a
// later change. A 412 to the mirror's own patch means the event changed
// under it: it is read again and patched from there, a few times at once,
// then with the backoff of transient failures, never set aside. Inserts
// need no condition (a second insert of the id answers 409), nor do
// deletes (a booking's last operation). Transient failures (429,
// 403 rate limits, 5xx, timeouts) are retried with capped exponential
// backoff and jitter; usage quotas (quotaExceeded, dailyLimitExceeded)
// pause every call for a long time; authorization failures (401,
// invalid_grant, 403, unknown calendar) mark the link degraded and pause it
// with a longer backoff, re-reading the credentials before each new
// attempt. An operation Google refuses for a reason of its own is retried
// a few times, then set aside as a dead letter so the others go on.
//
// Busy time (Google -> bookline): for links with sync_busy, the Syncer reads
// the Google calendar periodically, on demand and on push notifications
// (events.list with sync tokens; 410 means a full resync) and turns the
// events that make its owner busy (busyEvent) into busy.set / busy.clear
// commands, which go through the log like every other change; before a
// booking of a link with check_freebusy, Google's free/busy enters the log
// the same way. It writes the index only through those commands (and its
// own outbox bookkeeping).
//
// In a cluster only the owner of a calendar's partition mirrors it, and
// every mirror call is fenced by the partition's ownership epoch
// (Config.Fence): an instance that lost the partition without knowing it
// makes no call, and one in flight ends before the new owner's first.
// Push channels are kept in a store shared by the instances and the next
// start (Config.Channels), their tokens sealed (Config.Key).
//
// Caveats: sync tokens, link state and etags live in memory (a restart
// does a full resync, reads each event before its next change and reports
// no last_sync until the first success); the mirror is at least once and
// eventually consistent; a takeover delays a calendar's mirror by one
// takeover timeout (the new owner's wait on the epoch); an
// event edited by hand in Google keeps the edit until its booking changes
// again, and is then overwritten (the stale etag's 412 makes the mirror
// read the edit first; fields the mirror does not write, such as the
// location, stay); a late insert or delete of the mirror's own may still
// land after its retry, which at most repeats it.
package calendarsync
