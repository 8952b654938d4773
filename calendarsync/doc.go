// Package calendarsync connects bookline calendars to Google Calendar, in
// both directions, without ever putting Google on a booking's path.
//
// Mirror (bookline -> Google): the partition writer queues one sync
// operation per change of a confirmed booking of a linked calendar in the
// transaction that decides it (data.SyncEntry, bucket "gsync"). A Syncer
// drains that outbox per calendar, in sequence order, with idempotent
// calls: the Google event id is the booking id (26 characters of base32hex,
// a valid client-chosen event id), so a retried insert answers 409
// duplicate instead of creating a second event. Transient failures (429,
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
// Caveats: sync tokens, push channels and link state live in memory (a
// restart does a full resync, makes new channels and reports no last_sync
// until the first success); the mirror is at least once and eventually
// consistent; events edited by hand in Google are overwritten only when
// their booking changes again; a change whose answer was lost may still
// be applied by Google after a later one.
package calendarsync
