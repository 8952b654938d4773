// Package actor is bookline's domain: the command schema and the decision
// of every command.
//
// A partition's state changes only by commands of the log, applied in log
// order by the partition's single writer (queue). actor is what that writer
// runs: Decode turns a stored message into a validated Command (or a
// rejection; it never fails and needs no state), and Apply decides a batch
// of decoded commands against a data.Tx and produces one Output per
// message: the reply, the request record, the outcome event, the external
// calendar mirror operation.
//
// actor owns the JSON codecs of the wire shapes, one per shape, which
// every path uses: the command (commandjson.go: MarshalCommand for every
// producer, unmarshalCommand for Decode) and the reply (replyjson.go:
// MarshalReply for replies, request records' answers and outcome events;
// ReadReply for every reader), which carries data's Booking. Their hand
// written parts are exact shortcuts of encoding/json (fastpath.go holds
// the one reader), held to it by differential and fuzz tests and by tests
// that set every field by reflection (actor/actortest).
//
// Invariants:
//
//   - Decisions are a function of the index and the message alone. "Now" is
//     the message's stream timestamp, never earlier than the partition's
//     previous now (data.Tx.LogNow); ids come from the command or the stream
//     sequence; time zones only from the data built into the binary
//     (actor/zones); no map order reaches a reply, record or event. So a
//     replay, a recovery and a second instance reach byte-identical state,
//     and a stale second writer can only repeat the same answer.
//   - One decision function, decideInterval, answers "may this interval be taken":
//     bookings, holds, reschedules and the refusals answered from the index
//     (Refused) call it; availability answers what it would answer for every
//     grid start in one sweep, held to it by a differential test
//     (availability_internal_test.go).
//   - A redelivered message (sequence at or below the partition's applied
//     sequence) changes nothing and gets its recorded answer.
//   - An invalid command is answered and not recorded: it does not consume
//     its request id.
//   - apply asserts, after its writes and in the same transaction, that the
//     applied sequence and hash chain advanced by exactly the messages it
//     decided, and that a decided interval breaks neither the calendar's
//     capacity nor its busy time (invariants.go). A violation panics in a
//     test binary and is an *InvariantError otherwise: the transaction is
//     rolled back and the partition stops.
//
// actor is pure: it reads no clock and does no I/O besides the data.Tx it
// is given, its one port to the index. It opens no files (migrating an
// index of an older layout is the store owner's, queue, which runs
// data.Migrate with MigrateRecord) and knows no transport: the errors,
// trace ids and writer statistics the adapters exchange are declared by
// the adapter that owns them (queue), and cmd/bookline adapts them to
// httpapi. It imports data and actor/zones only, never queue, httpapi or
// calendarsync, which all depend on it; purity_test.go fails on an import
// of os, net, NATS, Fiber or bbolt other than through data, and on a call
// of a data function that does file I/O.
package actor
