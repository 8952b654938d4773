package queue

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
)

// Spreading the partitions over the live instances (cluster mode).
//
// Every instance that has caught up every partition registers in the KV
// bucket MembersBucket under its instance id and refreshes the entry four
// times per takeover timeout; the bucket's TTL is the takeover timeout and
// the server leaves a marker when an entry expires, so every watcher learns
// of a dead instance at the same moment, about one takeover timeout after
// its last heartbeat. A graceful stop deletes the entry at once.
//
// Every instance computes the same map from the same members (Assign) and
// pulls only the partitions assigned to it. NATS pinning stays the arbiter
// of who receives: an instance that is no longer assigned a partition stops
// pulling it, finishes what it received and unpins it, so the server pins
// the assigned instance's waiting pull. Views of the members differ only
// for the moment a change takes to reach the watchers; a partition then has
// two pullers or none for that moment, and two deciders are harmless by
// construction (deterministic apply, see cluster.go).

// MembersBucket is the KV bucket of the live instances.
const MembersBucket = "bookline_members"

// Member is one registered instance.
type Member struct {
	ID string `json:"id"`
	// Unable lists the partitions the instance cannot decide (stopped at
	// a command of a newer schema, or history it needs is missing): they
	// are assigned to another instance.
	Unable []int `json:"unable,omitempty"`
	// Schema is the newest command schema version the instance decides
	// (actor.KnownSchemaVersion; 0 from builds before it was advertised,
	// which know version 1).
	Schema int `json:"schema,omitempty"`
}

// knownSchema is the newest schema version m decides.
func (m Member) knownSchema() int { return max(m.Schema, 1) }

// score ranks member id for partition p (rendezvous hashing): FNV-1a of
// both, spread by a 64-bit finaliser so that similar ids rank apart.
func score(id string, p int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(p)))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Assign maps each of partitions to one of members: the member ranked
// highest for it (rendezvous hashing) among those that still have room,
// each holding at most ceil(partitions/len(members)), and never a member
// unable to decide it. Every instance computes the same map from the same
// members, whatever their order. A partition no member can take maps to ""
// (every instance may pull it).
func Assign(partitions int, members []Member) []string {
	out := make([]string, partitions)
	if len(members) == 0 {
		return out
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	ms = slices.CompactFunc(ms, func(a, b Member) bool { return a.ID == b.ID })
	room := (partitions + len(ms) - 1) / len(ms)
	count := make(map[string]int, len(ms))
	ranked := make([]Member, len(ms))
	for p := range partitions {
		copy(ranked, ms)
		slices.SortStableFunc(ranked, func(a, b Member) int {
			sa, sb := score(a.ID, p), score(b.ID, p)
			switch {
			case sa > sb:
				return -1
			case sa < sb:
				return 1
			}
			return 0
		})
		fallback := ""
		for _, m := range ranked {
			if slices.Contains(m.Unable, p) {
				continue
			}
			if fallback == "" {
				fallback = m.ID
			}
			if count[m.ID] < room {
				out[p] = m.ID
				break
			}
		}
		if out[p] == "" {
			out[p] = fallback
		}
		if out[p] != "" {
			count[out[p]]++
		}
	}
	return out
}

// membership registers this instance, watches the others and tells each
// partition whether it is assigned here.
type membership struct {
	kv    jetstream.KeyValue
	self  string
	ttl   time.Duration
	parts []*Partition
	log   *slog.Logger

	mu         sync.Mutex
	members    map[string]Member
	assign     []string
	registered bool
	unable     []int
	changed    time.Time // last change of the assignment
	rebalances int       // changes of the assignment since start
	// failingSince is when heartbeats of a ready instance began to fail
	// (zero while they work); after fallbackAfter of failures the
	// instance pulls every partition, as before there were members.
	failingSince time.Time
	fallback     bool
}

// fallbackAfter is how long a caught-up instance tries to register before
// it pulls every partition instead: without the members bucket (NATS
// permissions without $KV.bookline_members.>, say) pinning alone still
// keeps one writer per partition, just without balance.
func (m *membership) fallbackAfter() time.Duration { return 2 * m.ttl }

// ensureMembers creates the members bucket (its TTL is the takeover
// timeout of the first instance) or opens the existing one.
func ensureMembers(ctx context.Context, js jetstream.JetStream, ttl time.Duration, rp replicaPolicy) (jetstream.KeyValue, error) {
	return ensureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:         MembersBucket,
		Description:    "bookline instances that decide partitions (heartbeats; entries expire after the takeover timeout)",
		TTL:            ttl,
		LimitMarkerTTL: max(ttl, time.Second),
		Storage:        jetstream.FileStorage,
		Replicas:       rp.want,
	}, rp)
}

// heartbeatEvery is how often a registered instance refreshes its entry.
func (m *membership) heartbeatEvery() time.Duration { return max(m.ttl/4, 100*time.Millisecond) }

// ready reports whether every partition is caught up or stopped for good
// (then listed as unable), and which are unable.
func (m *membership) ready() (bool, []int) {
	ok := true
	var unable []int
	for _, p := range m.parts {
		if p.Stalled() != nil || p.Halted() != nil {
			unable = append(unable, p.ID)
			continue
		}
		ok = ok && p.CaughtUp()
	}
	return ok, unable
}

func (m *membership) run(ctx context.Context) {
	defer m.leave()
	for ctx.Err() == nil {
		if err := m.watch(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("watching the members bucket", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

func (m *membership) watch(ctx context.Context) error {
	w, err := m.kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	beat := time.NewTicker(m.heartbeatEvery())
	defer beat.Stop()
	m.mu.Lock()
	m.members = map[string]Member{}
	m.mu.Unlock()
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("members watcher stopped")
			}
			if e == nil { // the current entries are all delivered
				initial = false
				m.heartbeat(ctx)
				m.reassign()
				continue
			}
			m.mu.Lock()
			switch e.Operation() {
			case jetstream.KeyValuePut:
				var mem Member
				if json.Unmarshal(e.Value(), &mem) == nil && mem.ID == e.Key() {
					m.members[e.Key()] = mem
				}
			default: // deleted (left) or expired (dead)
				delete(m.members, e.Key())
			}
			m.mu.Unlock()
			if !initial {
				m.reassign()
			}
		case <-beat.C:
			m.heartbeat(ctx)
		}
	}
}

// heartbeat registers (once caught up) or refreshes this instance's entry.
func (m *membership) heartbeat(ctx context.Context) {
	ok, unable := m.ready()
	m.mu.Lock()
	registered := m.registered
	m.mu.Unlock()
	if !ok && !registered {
		return
	}
	b, _ := json.Marshal(Member{ID: m.self, Unable: unable, Schema: actor.KnownVersion()})
	c, cancel := context.WithTimeout(ctx, m.heartbeatEvery())
	defer cancel()
	if _, err := m.kv.Put(c, m.self, b); err != nil {
		m.mu.Lock()
		if m.fallback {
			m.log.Debug("membership heartbeat", "err", err)
		} else {
			m.log.Warn("membership heartbeat", "err", err)
		}
		if m.failingSince.IsZero() {
			m.failingSince = time.Now()
		}
		fallback := !m.registered && !m.fallback && time.Since(m.failingSince) >= m.fallbackAfter()
		if fallback {
			m.fallback = true
		}
		m.mu.Unlock()
		if fallback {
			m.log.Error("MEMBERSHIP UNAVAILABLE: cannot register in the members bucket; pulling every partition "+
				"(one writer per partition still holds, without balance). Allow publishing to $KV."+MembersBucket+".> and $KV."+ProgressBucket+".>",
				"err", err)
			m.reassign()
		}
		return
	}
	m.mu.Lock()
	m.failingSince = time.Time{}
	if !m.registered {
		m.log.Info("registered as a member: partitions are assigned to this instance from now on")
	}
	first := !m.registered
	m.registered, m.unable, m.fallback = true, unable, false
	m.mu.Unlock()
	if first {
		m.reassign()
	}
}

// reassign computes the map from the current members and tells every
// partition whether it is now assigned here.
func (m *membership) reassign() {
	m.mu.Lock()
	members := make([]Member, 0, len(m.members))
	for _, mem := range m.members {
		members = append(members, mem)
	}
	assign := Assign(len(m.parts), members)
	changed := !slices.Equal(assign, m.assign)
	if changed {
		m.assign = assign
		m.changed = time.Now()
		m.rebalances++
	}
	m.mu.Unlock()
	if changed {
		var mine []int
		for p, id := range assign {
			if id == m.self {
				mine = append(mine, p)
			}
		}
		ids := make([]string, 0, len(members))
		for _, mem := range members {
			ids = append(ids, mem.ID)
		}
		slices.Sort(ids)
		m.log.Info("partition assignment", "members", ids, "assigned_here", mine)
	}
	// An instance pulls nothing before it registered (it has not caught
	// up); a partition no member can decide is pulled by every member.
	m.mu.Lock()
	registered, fallback := m.registered, m.fallback
	m.mu.Unlock()
	for _, p := range m.parts {
		id := assign[p.ID]
		p.setAssigned(fallback || registered && (id == m.self || id == ""))
	}
}

// allKnow reports whether this instance is registered and every live
// member decides schema version v.
func (m *membership) allKnow(v int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.registered || len(m.members) == 0 {
		return false
	}
	for _, mem := range m.members {
		if mem.knownSchema() < v {
			return false
		}
	}
	return true
}

// notKnowing lists the live members that do not decide schema version v.
func (m *membership) notKnowing(v int) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, mem := range m.members {
		if mem.knownSchema() < v {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// knowing lists the live members other than this instance that decide
// schema version v.
func (m *membership) knowing(v int) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, mem := range m.members {
		if id != m.self && mem.knownSchema() >= v {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// leave deletes this instance's entry on a graceful stop, so the others
// take its partitions over at once instead of after the takeover timeout.
func (m *membership) leave() {
	m.mu.Lock()
	registered := m.registered
	m.registered = false
	m.mu.Unlock()
	if !registered {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.kv.Delete(ctx, m.self); err != nil {
		m.log.Warn("leaving the members", "err", err)
	}
}

// ClusterStatus is what an instance knows of the cluster.
type ClusterStatus struct {
	Cluster  bool   `json:"cluster"` // always true: cluster mode
	Instance string `json:"instance"`
	// Registered: this instance caught up and takes partitions.
	Registered bool     `json:"registered"`
	Members    []string `json:"members"`
	// Assignment maps each partition to its instance ("" when none can
	// take it: every instance pulls it).
	Assignment []string `json:"assignment"`
	// Assigned are this instance's partitions by the map; Consuming those
	// it pulls now; Owned those the server pins to it now.
	Assigned   []int `json:"assigned"`
	Consuming  []int `json:"consuming"`
	Owned      []int `json:"owned"`
	Unable     []int `json:"unable,omitempty"`
	Rebalances int   `json:"rebalances"`
	// LastRebalance is when the map last changed.
	LastRebalance time.Time `json:"last_rebalance,omitzero"`
}

// ClusterStatus reports the membership and assignment as this instance
// sees them (cluster mode; ok false otherwise).
func (n *Node) ClusterStatus(ctx context.Context) (st ClusterStatus, ok bool, err error) {
	if n.cluster == nil || n.members == nil {
		return st, false, nil
	}
	m := n.members
	m.mu.Lock()
	st.Cluster, st.Instance, st.Registered = true, m.self, m.registered
	for id := range m.members {
		st.Members = append(st.Members, id)
	}
	st.Assignment = slices.Clone(m.assign)
	st.Unable = slices.Clone(m.unable)
	st.Rebalances, st.LastRebalance = m.rebalances, m.changed
	m.mu.Unlock()
	slices.Sort(st.Members)
	for p, id := range st.Assignment {
		if id == m.self {
			st.Assigned = append(st.Assigned, p)
		}
	}
	for _, p := range n.parts {
		if p.active.Load() {
			st.Consuming = append(st.Consuming, p.ID)
		}
	}
	st.Owned, err = n.OwnedPartitions(ctx)
	return st, true, err
}

// ClusterReport is ClusterStatus for the HTTP API (httpapi.ClusterReporter),
// which knows no queue types.
func (n *Node) ClusterReport(ctx context.Context) (any, bool, error) {
	st, ok, err := n.ClusterStatus(ctx)
	return st, ok, err
}
