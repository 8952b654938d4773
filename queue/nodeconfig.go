package queue

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// NodeConfig configures one bookline process's queue side.
type NodeConfig struct {
	// DataDir holds the bbolt index (index.db) and, when embedded, NATS's
	// JetStream store (nats/).
	DataDir string
	// NATSURL empty starts an embedded server; otherwise the node connects
	// to that JetStream server (comma-separated URLs).
	NATSURL string
	// NATSListen is the embedded server's client address ("" = in-process
	// only).
	NATSListen string
	// NATSAuth, when set, makes the embedded server require credentials
	// of every connection, bookline's own included (auth.go).
	NATSAuth *Credentials
	// NATSTLS, when set, is the embedded server's TLS for clients that
	// connect over NATSListen.
	NATSTLS *tls.Config
	// NATSMaxStore and NATSMaxMemory are the embedded server's JetStream
	// limits in bytes (0: nats-server sizes them, see EmbeddedConfig).
	NATSMaxStore, NATSMaxMemory int64
	// SyncInterval is the opt-out from power-loss durability (--sync
	// interval). By default (false) every group commit makes the embedded
	// stream's new messages durable (fdatasync) before anything is
	// answered: a decided answer survives a power loss. With
	// SyncInterval the embedded stream is fsynced every 2 minutes and the
	// index never per commit; both survive a process crash, a power loss
	// may take the last minutes of commands, and an index left by a session
	// that died before a reboot is rebuilt from the stream. It has no
	// effect with NATSURL: the cluster's replication, on servers that sync
	// before they acknowledge (Servers, AllowLazySync), is the durability.
	// The index is never fsynced per commit (see StartNode).
	SyncInterval bool
	// AcceptHistory lists, per partition, the first differing stream
	// sequence of a history mismatch an operator accepts
	// (ParseAcceptHistory; --accept-stream-history): a partition refused
	// for exactly that difference is rebuilt from the stream as it is.
	AcceptHistory map[int]uint64
	// Partitions is the number of partitions (and writer goroutines). 0
	// takes the existing command stream's count, or for a new stream
	// DefaultPartitions (embedded server) or DefaultClusterPartitions
	// (with NATSURL).
	Partitions int
	// Replicas of the streams and buckets bookline creates (command and
	// event streams, the members, progress and webhook buckets, the
	// snapshot store). 0: with NATSURL min(3, servers in the cluster),
	// which needs Servers; 1 with the embedded server. An existing one
	// with fewer replicas is refused unless AllowFewerReplicas; bookline
	// never changes the replicas of what it finds.
	Replicas int
	// AllowFewerReplicas runs on existing streams and buckets that have
	// fewer replicas than Replicas, with a warning.
	AllowFewerReplicas bool
	// Servers says how, with NATSURL, every server's JetStream settings
	// are read at start (natscheck.go): a server that acknowledges before
	// it syncs (sync_interval other than always) is refused.
	Servers ServerCheck
	// AllowLazySync runs with NATSURL on servers that acknowledge before
	// they sync, or whose settings are not read (no Servers), with a loud
	// warning; Node.NATSDurability reports it.
	AllowLazySync bool
	// InstanceID names this instance among several sharing a stream
	// (cluster mode, i.e. with NATSURL; default DefaultInstanceID()).
	InstanceID string
	// TakeoverTimeout is how long a partition stays with an instance that
	// stopped pulling before another instance takes it over (cluster mode;
	// default DefaultTakeoverTimeout, at least MinTakeoverTimeout).
	TakeoverTimeout time.Duration
	// FollowInterval is how often, in cluster mode, the partitions other
	// instances own are brought up to the stream (default 10s; see
	// follow.go).
	FollowInterval time.Duration
	// HoldExpiryInterval is how often due holds are looked for (default 1s).
	HoldExpiryInterval time.Duration
	// CollectiveResolveAfter is how long a collective booking's part may
	// stay pending before the partition's owner resolves it (default
	// DefaultCollectiveResolveAfter); they are looked for as often as due
	// holds.
	CollectiveResolveAfter time.Duration
	// InternalRecordRetention is the log time for which the request
	// records of the commands bookline makes itself (hold.expire, busy
	// time from Google) are kept; the commands carry it
	// (record_ttl_seconds). 0 keeps them forever.
	InternalRecordRetention time.Duration
	// EventsMaxAge is the outcome event stream's retention (0 keeps
	// events for DefaultEventsMaxAge; negative keeps them forever).
	EventsMaxAge time.Duration
	// EventBatches publishes the outcome events of each drain of the
	// outbox whose partition is known as one message per partition on
	// EventBatchSubject, one line per event (--event-batches; see
	// eventbatch.go and docs/protocol.md section 11), instead of one
	// message per event (the default).
	EventBatches bool
	// DuplicateWindow overrides the stream's Nats-Msg-Id window when the
	// stream is created (default DuplicateWindow).
	DuplicateWindow time.Duration
	// NATSOptions are extra options for an external connection.
	NATSOptions []nats.Option
	Logger      *slog.Logger
	// Observer, when set, receives every committed batch and every failure
	// to publish outcome events (for metrics).
	Observer Observer
	// Snapshots says when index snapshots are taken and kept, and how
	// far the command stream is trimmed below them (see snapshot.go).
	Snapshots SnapshotConfig
	// SnapshotTaken, when set, is called after each snapshot (metrics).
	SnapshotTaken func(SnapshotInfo, time.Duration)
	// Followers make what runs beside the writers (see Follower), once
	// the index is open; each is started and stopped with the writers.
	Followers []func(*Node) Follower
	// MemoryRelease says when the memory of a bulk load is returned to
	// the OS (the zero value: after DefaultReleaseAfter commands).
	MemoryRelease MemoryRelease
}
