package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Node is the running queue side of a bookline process: NATS connection
// (and embedded server), the index, the partition writers and the client
// that submits commands and waits for their answers.
type Node struct {
	// closeOnce makes Close safe to call again (a deferred Close after
	// an explicit one); closeErr is what the first returned.
	closeOnce sync.Once
	closeErr  error

	store  *data.Store
	client *Client
	parts  []*Partition
	nc     *nats.Conn
	js     jetstream.JetStream

	ns     *server.Server
	stream jetstream.Stream // the command stream
	snaps  *snapshotter
	// followEvery is NodeConfig.FollowInterval.
	followEvery time.Duration
	cluster     *clusterMode // nil: the only instance (embedded server)
	// cmdSync and evtSync make the embedded streams' writes durable per
	// group commit (nil with --sync interval and in cluster mode).
	cmdSync, evtSync *logSync
	// snapSync makes a snapshot's parts durable as they are stored (same
	// condition as cmdSync).
	snapSync    *logSync
	events      *eventPublisher
	memory      *memoryReleaser
	holds       *holdExpirer
	collectives *collectiveResolver
	// members and progress spread partitions and their side effects over
	// the instances (cluster mode; membership.go, progress.go).
	members  *membership
	progress *progress
	// channels keeps the Google push channels (channels.go), made at
	// first use with replicas as the streams.
	channels     *ChannelStore
	channelsOnce sync.Once
	// internalTTL is the record_ttl_seconds of the commands the node makes
	// itself (NodeConfig.InternalRecordRetention).
	internalTTL int
	followers   []Follower
	mu          sync.Mutex // guards cancel (see lifecycle)
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	log         *slog.Logger

	// lifecycle serialises StartWriters and StopWriters; mu guards only
	// cancel, so that Ready, which the goroutines being stopped may call,
	// never waits for them to stop.
	lifecycle sync.Mutex
	// history is what a start does with a partition whose stream history
	// differs from its index (history.go).
	history historyPolicy
	// storage holds the write paths that fail for storage reasons now
	// (storage.go); watch finds and heals the embedded store's (nil with
	// NATSURL).
	storage *storageFaults
	watch   *storeWatch
	// durability is what NATSDurability reports; replicas the replicas
	// of what the node creates (NodeConfig.Replicas resolved).
	durability durability
	replicas   replicaPolicy
}

// IndexFile is the bbolt index's path inside a data directory.
func IndexFile(dataDir string) string { return filepath.Join(dataDir, "index.db") }

// StartNode starts NATS (or connects), opens the index, ensures the stream
// and starts one writer goroutine per partition. Partitions catch up in the
// background; Ready reports when they have.
//
// It runs in phases, one function each: settle the configuration
// (newNode), connect (connect), open the index (openIndex), make the
// streams and buckets (ensureResources), bring the index to the stream
// (recoverIndex), then make the writers and what serves them
// (startLogSyncs, build) and start them.
func StartNode(cfg NodeConfig) (_ *Node, err error) {
	n, err := newNode(&cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Close()
			err = storeStartProblem(err, cfg.DataDir, cfg.NATSMaxStore > 0)
		}
	}()
	nsOpts, err := n.connect(&cfg)
	if err != nil {
		return nil, err
	}
	if err = n.openIndex(cfg); err != nil {
		return nil, err
	}
	stream, obs, fresh, err := n.ensureResources(&cfg)
	if err != nil {
		return nil, err
	}
	if cfg.NATSAuth != nil && n.ns != nil {
		if nsOpts, err = cfg.NATSAuth.admitRoles(n.ns, nsOpts, cfg.Partitions); err != nil {
			return nil, err
		}
	}
	refused, err := n.recoverIndex(cfg, stream, obs, fresh)
	if err != nil {
		return nil, err
	}
	if err = n.startLogSyncs(cfg); err != nil {
		return nil, err
	}
	if err = n.build(cfg, stream, refused); err != nil {
		return nil, err
	}
	if n.ns != nil {
		// Checked once before anything is answered, so that a store
		// that is full already (or over its limit) says so at start.
		n.watch = newStoreWatch(n, n.ns, nsOpts, cfg.NATSMaxStore > 0, StoreDirFor(cfg.DataDir))
		n.watch.checkOnce()
		go n.watch.run()
	}
	n.StartWriters()
	return n, nil
}

// newNode checks cfg, settles its defaults (in place) and makes the node
// with what needs no I/O yet.
func newNode(cfg *NodeConfig) (*Node, error) {
	if cfg.Partitions < 0 || cfg.Partitions > 1024 {
		return nil, fmt.Errorf("queue: partitions must be 1..1024 (or 0: the stream's), got %d", cfg.Partitions)
	}
	if cfg.Replicas < 0 {
		return nil, fmt.Errorf("queue: replicas must not be negative, got %d", cfg.Replicas)
	}
	if cfg.NATSURL == "" && cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if err := cfg.Snapshots.check(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Only the embedded stream with --sync interval may lose commands it
	// acknowledged (its unsynced tail, in a power loss): anywhere else a
	// stream that lost them lost history.
	n := &Node{log: cfg.Logger, followEvery: cfg.FollowInterval,
		history: historyPolicy{lostTail: cfg.NATSURL == "" && cfg.SyncInterval || cfg.NATSURL != "" && cfg.AllowLazySync,
			accept: cfg.AcceptHistory}}
	if n.followEvery <= 0 {
		n.followEvery = followInterval
	}
	var countStorage func(string)
	if cfg.Observer != nil {
		countStorage = cfg.Observer.StorageWriteFailed
	}
	storeDir := ""
	if cfg.NATSURL == "" {
		storeDir = StoreDirFor(cfg.DataDir)
	}
	n.storage = newStorageFaults(cfg.DataDir, storeDir, cfg.Logger, countStorage)
	n.storage.storeWatched = storeDir != ""
	if cfg.NATSURL != "" {
		// Cluster mode: other instances may share the stream (cluster.go).
		if cfg.InstanceID == "" {
			cfg.InstanceID = DefaultInstanceID()
		}
		if cfg.TakeoverTimeout == 0 {
			cfg.TakeoverTimeout = DefaultTakeoverTimeout
		}
		if cfg.TakeoverTimeout < MinTakeoverTimeout {
			return nil, fmt.Errorf("queue: takeover timeout %s is below %s", cfg.TakeoverTimeout, MinTakeoverTimeout)
		}
		n.cluster = &clusterMode{instance: cfg.InstanceID, ttl: cfg.TakeoverTimeout}
		cfg.Logger = cfg.Logger.With("instance", cfg.InstanceID)
		n.log = cfg.Logger
	}
	return n, nil
}

// connect starts the embedded NATS server and connects to it, or, in
// cluster mode, checks the servers' settings and connects to them. It
// returns the embedded server's options (nil in cluster mode).
func (n *Node) connect(cfg *NodeConfig) (nsOpts *server.Options, err error) {
	if cfg.NATSURL == "" {
		n.durability = durability{detail: "ok: embedded NATS server; every answer waits for an fdatasync of its command (--sync always)"}
		if cfg.SyncInterval {
			n.durability = durability{lazy: true, detail: "LAZY (--sync interval): the embedded NATS server syncs every 2 minutes; " +
				"a power cut can lose the commands answered since"}
		}
		// The store's directory must outlive a power loss too; what
		// nats-server creates inside it is synced once started (syncTree).
		if err = data.MkdirAllDurable(StoreDirFor(cfg.DataDir)); err != nil {
			return nil, fmt.Errorf("queue: create the stream store directory: %w", err)
		}
		n.ns, nsOpts, err = startEmbedded(EmbeddedConfig{StoreDir: StoreDirFor(cfg.DataDir), Listen: cfg.NATSListen,
			Auth: cfg.NATSAuth, TLS: cfg.NATSTLS, MaxStore: cfg.NATSMaxStore, MaxMemory: cfg.NATSMaxMemory})
		if err != nil {
			return nil, err
		}
		var opts []nats.Option
		if cfg.NATSAuth != nil {
			o, err := cfg.NATSAuth.Option(RoleBookline)
			if err != nil {
				return nil, err
			}
			opts = append(opts, o, nats.CustomInboxPrefix(BooklineInboxPrefix))
		}
		n.nc, err = ConnectEmbedded(n.ns, "bookline", opts...)
	} else {
		if err = n.checkServers(cfg); err != nil {
			return nil, err
		}
		n.nc, err = Connect(cfg.NATSURL, "bookline "+cfg.InstanceID, cfg.NATSOptions...)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: connect nats: %w", err)
	}
	if n.js, err = jetstream.New(n.nc); err != nil {
		return nil, err
	}
	return nsOpts, nil
}

// startLogSyncs makes the embedded streams' writes durable per group
// commit (default --sync always): none with --sync interval or in cluster
// mode, where the servers sync.
func (n *Node) startLogSyncs(cfg NodeConfig) error {
	if cfg.NATSURL == "" && !cfg.SyncInterval {
		// What earlier sessions (maybe with --sync interval) and the
		// stream creation wrote is made durable once, before anything is
		// answered; from here on each group commit syncs what is new.
		store := StoreDirFor(cfg.DataDir)
		if err := syncTree(filepath.Join(store, server.JetStreamStoreDir), filepath.Clean(cfg.DataDir)); err != nil {
			return fmt.Errorf("queue: sync the stream store: %w", err)
		}
		observe := func(stream string) func(time.Duration) {
			if cfg.Observer == nil {
				return nil
			}
			return func(d time.Duration) { cfg.Observer.LogSynced(stream, d) }
		}
		n.cmdSync = newLogSync(streamMsgsDir(store, StreamName), cfg.Logger.With("component", "logsync", "stream", StreamName),
			observe(StreamName), embeddedLastSeq(n.ns, StreamName))
		n.evtSync = newLogSync(streamMsgsDir(store, EventStreamName), cfg.Logger.With("component", "logsync", "stream", EventStreamName),
			observe(EventStreamName), embeddedLastSeq(n.ns, EventStreamName))
	}
	if n.cmdSync != nil {
		obj := "OBJ_" + SnapshotBucket
		n.snapSync = newLogSync(streamMsgsDir(StoreDirFor(cfg.DataDir), obj), cfg.Logger.With("component", "logsync", "stream", obj),
			nil, embeddedLastSeq(n.ns, obj))
		n.snaps.sync = n.snapSync.Request
	}
	return nil
}

// build makes the node's parts around the index and the stream: the
// event publisher, the hold expirer, the submit client, the followers and
// one writer per partition (halted from the start when refused names it).
func (n *Node) build(cfg NodeConfig, stream jetstream.Stream, refused map[int]*HistoryMismatchError) (err error) {
	n.events = newEventPublisher(n.js, n.store, cfg.Logger)
	n.events.logSync = n.evtSync
	n.events.batches, n.events.partitions = cfg.EventBatches, cfg.Partitions
	n.memory = newMemoryReleaser(cfg.MemoryRelease, cfg.Logger)
	n.events.work = &n.memory.events
	every := cfg.HoldExpiryInterval
	if every <= 0 {
		every = time.Second
	}
	n.holds = &holdExpirer{js: n.js, stream: stream, store: n.store, log: cfg.Logger.With("component", "holds"), every: every,
		now: time.Now, early: map[string]earlyExpire{}, recordTTL: actor.RecordTTLSeconds(cfg.InternalRecordRetention)}
	n.internalTTL = actor.RecordTTLSeconds(cfg.InternalRecordRetention)
	after := cfg.CollectiveResolveAfter
	if after <= 0 {
		after = DefaultCollectiveResolveAfter
	}
	n.collectives = &collectiveResolver{n: n, log: cfg.Logger.With("component", "collectives"), every: every, after: after, now: time.Now}
	if cfg.Observer != nil {
		n.events.failed = cfg.Observer.EventPublishFailed
	}
	if n.client, err = NewClient(n.nc, n.recorded); err != nil {
		return err
	}
	for _, mk := range cfg.Followers {
		n.followers = append(n.followers, mk(n))
	}
	for i := 0; i < cfg.Partitions; i++ {
		p := NewPartition(i, n.nc, n.js, n.store, cfg.Logger)
		p.sys = newSystemLog(stream, i, cfg.Partitions)
		p.committed = n.committed
		p.logSync = n.cmdSync
		p.storage = n.storage
		p.work = &n.memory.commands
		p.local = n.client.DeliverLocal
		if n.cluster != nil {
			p.cluster, p.reads = n.cluster, make(chan catchRequest)
			p.lastSeqs = lastSeqs{fetch: p.lastSeqFor, timeout: 10 * time.Second}
		}
		if cfg.Observer != nil {
			p.observe = cfg.Observer.ObserveBatch
		}
		if e := refused[i]; e != nil {
			p.halt(e) // never started: its index stays as it is
		}
		n.parts = append(n.parts, p)
	}
	n.holds.parts = n.parts
	n.memory.writersIdle = func() bool {
		for _, p := range n.parts {
			if !p.idle.Load() {
				return false
			}
		}
		return true
	}
	n.memory.eventsIdle = n.events.idle.Load
	if n.members != nil {
		n.members.parts = n.parts
		n.events.cluster = &eventsCluster{parts: n.parts, progress: n.progress}
	}
	n.events.storage = n.storage
	return nil
}

// StartWriters starts one writer goroutine per partition. Each catches up
// from the index's applied sequence first.
func (n *Node) StartWriters() {
	n.lifecycle.Lock()
	defer n.lifecycle.Unlock()
	n.mu.Lock()
	if n.cancel != nil {
		n.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.mu.Unlock()
	if n.members == nil {
		// The only instance: the markers go to the stream before anything
		// else this start publishes, so that a new stream begins with
		// them (its first sequences, one per partition).
		mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := n.publishMarkers(mctx); err != nil {
			n.log.Warn("publishing the schema version 2 markers; trying again", "err", err)
		}
		mcancel()
	}
	n.wg.Add(7)
	go func() {
		defer n.wg.Done()
		n.events.run(ctx)
	}()
	go func() {
		defer n.wg.Done()
		n.upgradeRules(ctx)
	}()
	go func() {
		defer n.wg.Done()
		n.memory.run(ctx)
	}()
	go func() {
		defer n.wg.Done()
		n.follow(ctx)
	}()
	go func() {
		defer n.wg.Done()
		n.snaps.run(ctx)
	}()
	go func() {
		defer n.wg.Done()
		n.holds.run(ctx)
	}()
	go func() {
		defer n.wg.Done()
		n.collectives.run(ctx)
	}()
	if n.members != nil {
		n.wg.Add(2)
		go func() {
			defer n.wg.Done()
			n.members.run(ctx)
		}()
		go func() {
			defer n.wg.Done()
			n.progress.watch(ctx)
		}()
	}
	for _, f := range n.followers {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			f.Run(ctx)
		}()
	}
	for _, p := range n.parts {
		p.caughtUp.Store(false)
		if n.members != nil {
			p.assigned.Store(false) // until this instance registered again
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			p.Run(ctx)
		}()
	}
}

// StopWriters stops the writers after the batches in flight are committed,
// answered and acked. Commands published meanwhile wait in the stream.
func (n *Node) StopWriters() {
	n.lifecycle.Lock()
	defer n.lifecycle.Unlock()
	n.mu.Lock()
	cancel := n.cancel
	n.cancel = nil
	n.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	n.wg.Wait()
}

// ErrNotReady is returned by Ready while the node cannot serve.
var ErrNotReady = errors.New("queue: not ready")

// Ready returns nil once NATS is connected and every partition has caught
// up with what the stream held when it started.
func (n *Node) Ready() error {
	n.mu.Lock()
	running := n.cancel != nil
	n.mu.Unlock()
	// First: the writers are stopped while a full store is reloaded.
	if err := n.storage.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrNotReady, err)
	}
	if !running {
		return fmt.Errorf("%w: partition writers stopped", ErrNotReady)
	}
	if !n.nc.IsConnected() {
		return fmt.Errorf("%w: nats %s", ErrNotReady, n.nc.Status())
	}
	for _, l := range []*logSync{n.cmdSync, n.evtSync, n.snapSync} {
		if l == nil {
			continue
		}
		if err := l.Err(); err != nil {
			return fmt.Errorf("%w: %v", ErrNotReady, err)
		}
	}
	for _, p := range n.parts {
		if e := p.Stalled(); e != nil {
			return fmt.Errorf("%w: partition %d stopped: %v", ErrNotReady, p.ID, e)
		}
		if err := p.Halted(); err != nil {
			return fmt.Errorf("%w: partition %d: %w", ErrNotReady, p.ID, err)
		}
		if !p.CaughtUp() {
			return fmt.Errorf("%w: partition %d catching up (applied seq %d)", ErrNotReady, p.ID, p.AppliedSeq())
		}
	}
	return nil
}

// ClientURL is the URL outside clients (importers) reach the embedded
// server on, or "" when it listens in-process only or is external.
func (n *Node) ClientURL() string {
	if n.ns == nil || n.ns.Addr() == nil {
		return ""
	}
	return n.ns.ClientURL()
}

// Submit publishes a command and waits for its answer (see Client.Submit).
// While a write path fails for storage reasons it fails at once with
// ErrUnavailable, saying why: the command could not be decided (or not
// even stored) until there is room, and a publish would only wait for its
// timeout. So does a command of a partition this only instance stopped
// for good (Partition.Halted).
func (n *Node) Submit(ctx context.Context, cmd *actor.Command, fingerprint string) ([]byte, error) {
	if err := n.storage.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if n.cluster == nil && len(n.parts) > 0 && actor.ValidCalendarID(cmd.CalendarID) {
		// The only instance stopped this partition for good (its stream
		// lacks or changed history): nobody would decide the command.
		p := PartitionOf(cmd.CalendarID, len(n.parts))
		if err := n.parts[p].Halted(); err != nil {
			return nil, fmt.Errorf("%w: partition %d: %w", ErrUnavailable, p, err)
		}
	}
	if cmd.V > actor.SchemaVersion && n.members != nil && !n.members.allKnow(cmd.V) {
		// A build keeps writing the older version until every instance
		// decides the newer one: an older member would stop its
		// partition at this command (docs/protocol.md, "Versions").
		return nil, fmt.Errorf("%w: not every instance decides schema version %d yet (instances before it: %s); retry after the upgrade",
			ErrUnavailable, cmd.V, strings.Join(n.members.notKnowing(cmd.V), ","))
	}
	reply, err := n.client.Submit(ctx, cmd, fingerprint)
	if errors.Is(err, ErrUnavailable) {
		// A refusal for lack of room (the store over its limit) is a
		// failed write; the store watch reports the state itself.
		if component, _, ok := storageProblem(err); ok {
			n.storage.counted(component)
		}
	}
	return reply, err
}

// EveryInstanceDecides reports whether every instance of the cluster
// decides schema version v (always, for an instance alone): what a
// producer needs before it relies on a rule of that version that other
// instances' resolvers must follow too.
func (n *Node) EveryInstanceDecides(v int) bool { return n.members == nil || n.members.allKnow(v) }

// StorageFailing says, per storage component (StorageIndex, StorageNATS),
// whether a write path of it fails for storage reasons now.
func (n *Node) StorageFailing() map[string]bool { return n.storage.failing() }

// View runs fn in a read-only transaction on the index.
func (n *Node) View(fn func(*data.Tx) error) error {
	return unavailableIfClosed(n.store.View(fn))
}

// unavailableIfClosed marks the error of a read of a closed index as
// ErrUnavailable: the node is stopping, nothing is wrong with the read,
// and another instance (or this one, restarted) can serve it. Every read
// that answers a request goes through it; a request that raced the
// shutdown was answered 500 internal before.
func unavailableIfClosed(err error) error {
	if errors.Is(err, data.ErrClosed) {
		return errors.Join(ErrUnavailable, err)
	}
	return err
}

// Logger is the node's logger (with the instance id in cluster mode).
func (n *Node) Logger() *slog.Logger { return n.log }

// Store is the node's index. Callers read it (View) and hand it to what
// runs beside the writers; only the writers commit decisions to it.
func (n *Node) Store() *data.Store { return n.store }

// Client submits commands and waits for their answers; Submit adds the
// node's storage and halted-partition checks in front of it.
func (n *Node) Client() *Client { return n.client }

// Parts are the partition writers, indexed by partition number. The slice
// is a copy: the node's set of writers is fixed when it starts.
func (n *Node) Parts() []*Partition { return slices.Clone(n.parts) }

// Conn is the node's NATS connection.
func (n *Node) Conn() *nats.Conn { return n.nc }

// JetStream is the node's JetStream context on Conn.
func (n *Node) JetStream() jetstream.JetStream { return n.js }

// CommitStats are the index's group-commit counters.
func (n *Node) CommitStats() data.CommitStats { return n.store.Stats() }
