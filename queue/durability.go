package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// durability says whether a command the node answered survives a power
// cut of the NATS servers, as far as the node knows.
type durability struct {
	// lazy: the stream's servers acknowledge before they sync (or were not
	// checked), so answered commands may be lost to a power cut.
	lazy bool
	// detail says why, for /readyz.
	detail string
}

// NATSDurability reports whether answered commands may be lost to a power
// cut of the NATS servers (lazy), and why: in cluster mode what the check
// of the servers found (or that it was skipped with AllowLazySync), with
// the embedded server the --sync mode.
func (n *Node) NATSDurability() (lazy bool, detail string) {
	return n.durability.lazy, n.durability.detail
}

// Replicas is the number of replicas of what the node creates in
// JetStream (NodeConfig.Replicas, resolved at start).
func (n *Node) Replicas() int { return n.replicas.want }

// EnsureKeyValue opens the KV bucket cfg.Bucket or creates it, with the
// node's replicas (cfg.Replicas is replaced), retrying what a cluster
// that is still settling refuses, and refusing an existing bucket with
// fewer replicas unless NodeConfig.AllowFewerReplicas. For the buckets of
// other components (webhooks).
func (n *Node) EnsureKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	cfg.Replicas = n.replicas.want
	return ensureKeyValue(ctx, n.js, cfg, n.replicas)
}

// checkServers reads the JetStream settings of every server (cluster
// mode), refuses servers that acknowledge before they sync unless
// cfg.AllowLazySync, and resolves cfg.Replicas 0 to min(3, servers).
func (n *Node) checkServers(cfg *NodeConfig) error {
	log := cfg.Logger
	size := 0
	switch {
	case !cfg.Servers.Given() && !cfg.AllowLazySync:
		return ErrNoServerCheck
	case !cfg.Servers.Given():
		n.durability = durability{lazy: true, detail: "UNCHECKED (--allow-lazy-nats-sync): the NATS servers' sync settings " +
			"were not read; if they acknowledge before they sync (NATS's default), a power cut can lose answered commands"}
	default:
		wait := cfg.Servers.Wait
		if wait <= 0 {
			wait = DefaultServerCheckWait
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		r, err := CheckServers(ctx, cfg.Servers)
		cancel()
		size = r.Size
		lazy := r.Lazy()
		switch {
		case err != nil && !cfg.AllowLazySync:
			return fmt.Errorf("%w (start with --allow-lazy-nats-sync to run without the check)", err)
		case err != nil:
			n.durability = durability{lazy: true, detail: "UNCHECKED (--allow-lazy-nats-sync): " + err.Error()}
		case len(lazy) > 0 && !cfg.AllowLazySync:
			return lazyServersError(lazy)
		case len(lazy) > 0:
			n.durability = durability{lazy: true, detail: "LAZY (--allow-lazy-nats-sync): " + lazyNames(lazy) +
				" acknowledge before they sync; a power cut of the cluster can lose answered commands"}
		default:
			n.durability = durability{detail: "ok: every NATS server syncs before it acknowledges (sync_interval: always): " +
				strings.Join(r.Names(), ", ")}
			log.Info("nats servers sync before they acknowledge", "servers", r.Names(), "cluster_size", r.Size)
		}
	}
	if n.durability.lazy {
		log.Error("LAZY NATS SYNC: answered commands may be lost to a power cut of the NATS servers; "+
			"set `jetstream { sync_interval: always }` on every server and drop --allow-lazy-nats-sync",
			"detail", n.durability.detail)
	}
	switch {
	case cfg.Replicas == 0 && size == 0:
		return errors.New("queue: the number of NATS servers is unknown (their settings were not read): " +
			"give --replicas (3 on a 3-node cluster), or the servers' monitoring URLs or a system account user")
	case cfg.Replicas == 0:
		cfg.Replicas = min(3, size)
		log.Info("replicas of the streams and buckets: min(3, servers in the cluster)", "replicas", cfg.Replicas, "servers", size)
	case size > 0 && cfg.Replicas > size:
		return fmt.Errorf("queue: %d replicas asked, but the NATS cluster has %d servers", cfg.Replicas, size)
	}
	return nil
}
