// Package queue is bookline's log adapter: NATS JetStream, the command
// stream as a public contract, and the partition writers that apply it.
//
// Commands are published to bookline.cmd.<calendar>; the stream's subject
// transform files them under their partition (FNV-1a of the calendar id).
// One Partition goroutine per partition consumes them in stream order,
// decodes and decides each batch with actor inside the index's group commit
// (data.Store), and only once the batch is committed, and with the default
// --sync always its messages are on disk, replies (over NATS request-reply,
// or straight to this process's own waiting client) and acknowledges. Client submits commands and waits for their replies;
// Replay and verify rebuild an index from the stream.
//
// Invariants:
//
//   - The stream is the source of truth: an index found ahead of its
//     stream, or built on a stream whose history does not reach back far
//     enough, is rebuilt or refused, never trusted (recovery.go).
//   - No answer is sent, and no reader sees a decision, before the command
//     it derives from is durable: fdatasynced with the embedded server's
//     default --sync always (logsync.go, data.Store.CommitDurable),
//     replicated on a cluster whose every server syncs before it
//     acknowledges, checked at start (natscheck.go); --sync interval and
//     AllowLazySync give that up, explicitly and loudly.
//   - What bookline keeps in JetStream is found or created idempotently,
//     each request bounded and retried while the cluster settles, so that
//     instances may start together (ensure.go); an existing stream or
//     bucket with fewer replicas than asked is refused, never changed.
//   - A write that fails for lack of space (the index, the embedded
//     server's store) is neither acknowledged nor answered: the node
//     reports it (Ready: "storage full"), refuses new commands meanwhile
//     and resumes by itself once there is room, without a restart
//     (storage.go, natsstore.go). A failed fsync is not that: it stays
//     fatal.
//   - In cluster mode one instance at a time is pinned to a partition;
//     should two ever decide at once they decide the same, since apply is
//     deterministic.
//
// queue decides nothing itself (actor does) and knows nothing of HTTP,
// Google or Prometheus: it imports actor and data, never httpapi or
// calendarsync. What runs beside the writers (the Google sync) is a
// Follower that cmd/bookline hands to the Node; what it reports for
// metrics goes to an Observer.
//
// A Node is built by one call, StartNode, from a NodeConfig that carries
// everything it needs, the ports (Observer, Followers) included; it has no
// exported fields, and what callers may use of it (Store, Client, Parts,
// Conn, JetStream) they read through methods. It owns the index files: it
// opens, restores, sets aside and migrates them (convertIndex, with
// actor.MigrateRecord for the records), never the actor. The errors of the
// log (ErrUnavailable, ErrPending, ErrNotStopped, ErrNoPartition, errors.go)
// and the trace id sent with a command (WithTraceID) are declared here;
// the errors say what they are by behaviour too (Unavailable(), ...), so
// that httpapi tells them apart without importing this package.
package queue
