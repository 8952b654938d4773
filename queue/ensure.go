package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Creating what bookline keeps in JetStream (streams, KV buckets, the
// snapshot object store, the partition consumers) must work when several
// instances start at the same moment on a fresh cluster. Two things go
// wrong there without care:
//
//   - a create request that another instance's identical request overtook
//     may never be answered: the meta leader proposes the equal assignment
//     again and the reply goes to nobody, so the client waits for its whole
//     timeout ("context deadline exceeded");
//   - while the meta leader settles, requests fail with "JetStream system
//     temporarily unavailable", "insufficient resources" (the peers are not
//     known yet), "JetStream not enabled" or no responders at all, and a
//     name another request is creating is "already in use" to a create
//     but "not found" to a look-up until the creation is applied.
//
// An account without JetStream, or too few servers for the replicas, look
// the same as a cluster still settling: they fail after the whole wait,
// with the last error.
//
// So every creation is "look, create if absent, look again if someone else
// created it", each request with a short timeout of its own, and the whole
// retried with backoff on the failures that waiting cures, up to the
// caller's deadline. An error that waiting does not cure (a stream of
// another configuration, a permission) ends it at once.

// ensureAttemptMin bounds the first attempt of an ensure: an unanswered
// create is given up after it and the resource looked up again. Each
// further attempt may take twice as long, up to ensureAttemptMax, so that
// a cluster that is merely slow (loaded, or syncing every write) gets
// there too. Four instances started together on a fresh 3-node cluster
// were all started after 2.1-2.9 s with a first bound of 2 s, 5.2-5.9 s
// with 5 s: a dropped reply costs one bound.
const (
	ensureAttemptMin = 2 * time.Second
	ensureAttemptMax = 8 * time.Second
)

// ensureBackoffMin and ensureBackoffMax bound the waits between attempts;
// the waits are jittered so that instances started together spread out.
const (
	ensureBackoffMin = 50 * time.Millisecond
	ensureBackoffMax = 2 * time.Second
)

// EnsureError says what a start waited for in JetStream and why it gave up:
// the resource, how long and how often it tried, and the last error.
type EnsureError struct {
	What     string // e.g. "stream BOOKLINE_CMD (3 replicas)"
	Waited   time.Duration
	Attempts int
	Last     error
}

func (e *EnsureError) Error() string {
	return fmt.Sprintf("queue: waited %s for %s (%d attempts; the JetStream cluster may lack a quorum, "+
		"its meta leader may still be settling, or it may lack servers for the replicas asked): last error: %v",
		e.Waited.Round(time.Millisecond), e.What, e.Attempts, e.Last)
}

func (e *EnsureError) Unwrap() error { return e.Last }

// retryJS runs op until it succeeds, fails with an error that waiting does
// not cure, or ctx ends (then an *EnsureError naming what). Each attempt
// gets a bound of its own (ensureAttemptMin, growing).
func retryJS[T any](ctx context.Context, what string, op func(context.Context) (T, error)) (T, error) {
	began := time.Now()
	wait, bound := ensureBackoffMin, ensureAttemptMin
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, bound)
		v, err := op(actx)
		cancel()
		if err == nil {
			return v, nil
		}
		var zero T
		if ctx.Err() == nil && !transientJS(err) {
			return zero, fmt.Errorf("queue: %s: %w", what, err)
		}
		// Half to all of wait, so that instances started together do
		// not keep asking at the same instants.
		pause := wait/2 + rand.N(wait/2+1)
		if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(dl) < pause {
			return zero, &EnsureError{What: what, Waited: time.Since(began), Attempts: attempt, Last: err}
		}
		select {
		case <-ctx.Done():
			return zero, &EnsureError{What: what, Waited: time.Since(began), Attempts: attempt, Last: err}
		case <-time.After(pause):
		}
		wait, bound = min(2*wait, ensureBackoffMax), min(2*bound, ensureAttemptMax)
	}
}

// errInFlight marks a stream that another request is creating: its name
// is taken ("already in use") but it cannot be looked up yet ("not
// found"), until the meta leader has applied its creation.
var errInFlight = errors.New("being created by another request")

// creating turns "not found" after a create into errInFlight.
func creating(err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("%w: %w", errInFlight, err)
	}
	return err
}

// transientJS says whether a JetStream API failure may go away by itself:
// a request not answered in time, no responders (JetStream not up yet), a
// connection being re-established, or the cluster's own "not now" answers.
func transientJS(err error) bool {
	if errors.Is(err, errInFlight) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) {
		return true
	}
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case 10004, // incomplete results
		10005, // no peers for placement (peers not known yet)
		10008, // JetStream system temporarily unavailable
		10009, // cluster cannot handle the request (no leader)
		10023, // insufficient resources (while the meta leader settles)
		10075, // peer remap failed
		10118, // stream offline
		10119: // consumer offline
		return true
	}
	return api.Code == 503
}

// replicaPolicy is what a start asks of the replicas of the streams and
// buckets it finds or creates.
type replicaPolicy struct {
	want int
	// allowFewer accepts an existing one with fewer replicas than want
	// (with a warning); otherwise it is refused.
	allowFewer bool
	log        *slog.Logger
}

// ErrFewerReplicas is returned when an existing stream or bucket has
// fewer replicas than asked; bookline neither lowers nor raises the
// replicas of what it finds.
var ErrFewerReplicas = errors.New("queue: fewer replicas than asked")

// check refuses (or, with allowFewer, reports) an existing stream with
// fewer replicas than asked. More than asked is fine: bookline never
// lowers them.
func (rp replicaPolicy) check(kind, name string, have int) error {
	have = max(have, 1)
	if have >= rp.want {
		return nil
	}
	how := raiseReplicasHow(kind, name, rp.want)
	if rp.allowFewer {
		rp.log.Warn("FEWER REPLICAS THAN ASKED: running on with them (--allow-fewer-replicas)",
			"kind", kind, "name", name, "replicas", have, "asked", rp.want, "to_raise", how)
		return nil
	}
	return fmt.Errorf("%w: %s %s has %d, %d asked (--replicas; in cluster mode the default is min(3, servers)). "+
		"Raise it with %s, or start with --allow-fewer-replicas to run on it as it is, or with --replicas %d",
		ErrFewerReplicas, kind, name, have, rp.want, how, have)
}

// raiseReplicasHow is the nats CLI command that raises the replicas of an
// existing stream or bucket.
func raiseReplicasHow(kind, name string, want int) string {
	stream := name
	switch kind {
	case "KV bucket":
		stream = "KV_" + name
	case "object store":
		stream = "OBJ_" + name
	}
	return fmt.Sprintf("`nats stream edit %s --replicas %d`", stream, want)
}

// ensureWait bounds the creation (or lookup) of the streams, buckets and
// object store at start: on a fresh cluster, with several instances
// starting at once, it includes the meta leader's election and the
// retries of requests the cluster dropped (ensure.go).
const ensureWait = 2 * time.Minute

// ensureResources finds or creates what the node keeps in JetStream: the
// command and event streams, the snapshot store (fresh: created just now)
// and in cluster mode the members and progress buckets. cfg.Partitions 0
// becomes the existing stream's count or the default.
func (n *Node) ensureResources(cfg *NodeConfig) (stream jetstream.Stream, obs jetstream.ObjectStore, fresh bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), ensureWait)
	defer cancel()
	n.replicas = replicaPolicy{want: cfg.Replicas, allowFewer: cfg.AllowFewerReplicas, log: cfg.Logger}
	if cfg.Partitions == 0 {
		if cfg.Partitions, err = defaultPartitions(ctx, n.js, cfg.NATSURL != ""); err != nil {
			return nil, nil, false, err
		}
	}
	scfg := StreamConfig(cfg.Partitions, cfg.Replicas)
	if cfg.DuplicateWindow > 0 {
		scfg.Duplicates = cfg.DuplicateWindow
	}
	// With snapshots the stream may be trimmed below them, now or later:
	// a purge must stay possible (the server never lifts DenyPurge).
	scfg.DenyPurge = !cfg.Snapshots.On()
	if stream, err = EnsureStream(ctx, n.js, scfg); err != nil {
		return nil, nil, false, err
	}
	if err = n.replicas.check("stream", StreamName, stream.CachedInfo().Config.Replicas); err != nil {
		return nil, nil, false, err
	}
	stream = denyRemovals(ctx, n.js, stream, !cfg.Snapshots.On(), cfg.Logger)
	n.stream = stream
	if _, err = ensureEventStream(ctx, n.js, cfg.EventsMaxAge, n.replicas); err != nil {
		return nil, nil, false, err
	}
	if obs, fresh, err = ensureSnapshotStore(ctx, n.js, n.replicas); err != nil {
		return nil, nil, false, err
	}
	if n.cluster == nil {
		return stream, obs, fresh, nil
	}
	n.cluster.stream = stream
	kv, err := ensureMembers(ctx, n.js, cfg.TakeoverTimeout, n.replicas)
	if err != nil {
		return nil, nil, false, err
	}
	n.members = &membership{kv: kv, self: cfg.InstanceID, ttl: cfg.TakeoverTimeout, log: cfg.Logger.With("component", "members")}
	pkv, err := ensureProgress(ctx, n.js, n.replicas)
	if err != nil {
		return nil, nil, false, err
	}
	n.progress = newProgress(pkv, stream.CachedInfo().Created, cfg.Partitions, cfg.Logger)
	n.cluster.progress = n.progress
	return stream, obs, fresh, nil
}

// ensureStreamExists finds the stream cfg.Name or creates it with cfg. It
// does not compare an existing stream's configuration: the caller checks
// what matters to it.
func ensureStreamExists(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	what := fmt.Sprintf("stream %s (%d replicas)", cfg.Name, max(cfg.Replicas, 1))
	return retryJS(ctx, what, func(ctx context.Context) (jetstream.Stream, error) {
		s, err := js.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			s, err = js.CreateStream(ctx, cfg)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				s, err = js.Stream(ctx, cfg.Name) // another instance was first
			}
			err = creating(err)
		}
		return s, err
	})
}

// ensureKeyValue opens the KV bucket cfg.Bucket or creates it with cfg,
// and checks its replicas against rp. An existing bucket keeps its
// configuration (the first instance's).
func ensureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, rp replicaPolicy) (jetstream.KeyValue, error) {
	what := fmt.Sprintf("KV bucket %s (%d replicas)", cfg.Bucket, max(cfg.Replicas, 1))
	type opened struct {
		kv       jetstream.KeyValue
		replicas int
	}
	o, err := retryJS(ctx, what, func(ctx context.Context) (opened, error) {
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				kv, err = js.KeyValue(ctx, cfg.Bucket)
			}
			err = creating(err)
		}
		if err != nil {
			return opened{}, err
		}
		s, err := js.Stream(ctx, "KV_"+cfg.Bucket)
		if err != nil {
			return opened{}, creating(err)
		}
		return opened{kv, s.CachedInfo().Config.Replicas}, nil
	})
	if err != nil {
		return nil, err
	}
	if err := rp.check("KV bucket", cfg.Bucket, o.replicas); err != nil {
		return nil, err
	}
	return o.kv, nil
}

// ensureObjectStore opens the object store cfg.Bucket or creates it with
// cfg (created says this call did), and checks its replicas against rp.
func ensureObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig, rp replicaPolicy) (jetstream.ObjectStore, bool, error) {
	what := fmt.Sprintf("object store %s (%d replicas)", cfg.Bucket, max(cfg.Replicas, 1))
	type opened struct {
		obs      jetstream.ObjectStore
		created  bool
		replicas int
	}
	o, err := retryJS(ctx, what, func(ctx context.Context) (opened, error) {
		created := false
		obs, err := js.ObjectStore(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			obs, err = js.CreateObjectStore(ctx, cfg)
			created = err == nil
			if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				obs, err = js.ObjectStore(ctx, cfg.Bucket)
			}
			err = creating(err)
		}
		if err != nil {
			return opened{}, err
		}
		st, err := obs.Status(ctx)
		if err != nil {
			return opened{}, creating(err)
		}
		return opened{obs, created, st.Replicas()}, nil
	})
	if err != nil {
		return nil, false, err
	}
	if err := rp.check("object store", cfg.Bucket, o.replicas); err != nil {
		return nil, false, err
	}
	return o.obs, o.created, nil
}
