// Command pgbaseline is a COMPARISON BASELINE, not part of bookline: a small
// server that implements bookline's HTTP booking routes on PostgreSQL, so that
// `bookline bench` (and `make bench-compare`) can measure bookline against
// the strongest common answer to "why not just use PostgreSQL?".
//
// Overlaps are prevented by an exclusion constraint,
//
//	EXCLUDE USING gist (calendar_id WITH =, tstzrange(start_time, end_time, '[)') WITH &&)
//	    WHERE (status = 'confirmed')
//
// (needs the btree_gist extension). Under heavy concurrent conflicting
// inserts the exclusion check alone deadlocks (40P01, about 1 s each at the
// default deadlock_timeout), so every booking first locks its calendar's row
// (SELECT ... FOR UPDATE on calendars), which serialises writes per calendar
// and removes the deadlocks; the constraint stays as the guarantee. Lock,
// conflict query and insert run in one PL/pgSQL function call: one round
// trip and one commit per booking, the lock held until that commit. A
// conflict already visible before the lock is answered without taking it
// (a read-only transaction, no WAL flush), which makes the hot-calendar case
// as cheap as PostgreSQL can make it; --lock-only turns that off (the plain
// lock-first variant). This is
// the strongest fair variant we know (docs/benchmarks.md says more).
//
// It is one file on purpose: whoever checks that the comparison is fair
// should find the schema, the SQL and the handlers together.
//
// Routes (same paths, status codes and JSON shapes as bookline):
//
//	PUT    /v1/calendars/{id}                      201 created / 200 updated
//	GET    /v1/calendars/{id}                      200 / 404 calendar_not_found
//	POST   /v1/calendars/{id}/bookings             201 / 409 slot_taken (+conflict) / 404 / 400
//	GET    /v1/calendars/{id}/bookings             from, to, limit, cursor -> {"bookings", "next_cursor"}
//	GET    /v1/calendars/{id}/bookings/{bid}       200 / 404 booking_not_found
//	DELETE /v1/calendars/{id}/bookings/{bid}       200 cancelled (same on repeat) / 404
//	POST   /v1/bookings                            a collective: {"calendar_ids", "start", ...}
//	                                               201 / 409 slot_taken (+conflict naming the
//	                                               member) / 404 / 400
//	GET    /healthz                                200 when the database answers
//
// A collective booking (one interval on every listed calendar, or on none)
// is one transaction too: book_collective locks each member's calendar row
// in id order (the order makes two collectives sharing members unable to
// deadlock), checks it, and inserts one row per member under the same
// booking id; one commit, one WAL flush. The same lock-free pre-check
// answers a conflict already visible on a member.
//
// Not implemented (bookline features outside the comparison): Idempotency-Key,
// 202 pending answers, request lookups, events, API keys, and cancelling a
// collective on every member (a DELETE cancels the named member's part).
//
// It serves over Fiber (fasthttp), the HTTP stack of bookline's own API, so
// that the comparison measures the storage designs and not two HTTP servers:
// on a small machine shared with the load generator, net/http's per-request
// CPU is CPU the database then lacks. Fiber runs each request on a goroutine
// of its own and the handlers block on pgx's pool and round trips, which is
// what goroutines are for; every request gets a deadline (--request-timeout),
// so a stuck database cannot hold connections and goroutines forever.
//
// Values Fiber hands out (path parameters, query values, the body) alias
// fasthttp's buffers and are valid only until the handler returns; the
// handlers use them only inside the call (pgx encodes its arguments before
// the query returns, and the answer is encoded before the handler returns).
package main
