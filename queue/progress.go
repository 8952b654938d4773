package queue

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Side effects that survive the instance that decided them (cluster mode).
//
// Every instance derives the same side effects from the log: when it
// applies commands another instance decided (catch-up for a read, at start
// or at a takeover) it queues their Google mirror operations and, for the
// commands whose outcome event is not known to be published, their events,
// in its own outbox (actor.ApplyTakeover). Only the instance a partition is
// assigned to and consuming sends them; the others keep them until the
// KV bucket ProgressBucket says they are done, then drop them:
//
//   - evt.<stream>.<p>: the highest command sequence of partition p below
//     which every outcome event is in BOOKLINE_EVT, written by the owner's
//     event publisher after the acks;
//   - gsync.<stream>.<calendar>: the sequence up to which Google confirmed
//     the calendar's mirror operations, written by the owner's drainer;
//   - own.<stream>.<p>: partition p's ownership epoch (its revision), which
//     fences the owner's calls to Google (fence.go).
//
// <stream> is the command stream's creation time in Unix nanoseconds: a
// recreated stream numbers from 1 again. A watermark that lags (the owner
// died between the acks and the write) only makes the next owner send
// again what was done: events carry the same Nats-Msg-Id (deduplicated by
// the event stream's window), and mirror operations are idempotent and
// replayed in order, so the calendar ends as the log says.

// ProgressBucket is the KV bucket of the side-effect watermarks.
const ProgressBucket = "bookline_progress"

type progress struct {
	kv     jetstream.KeyValue
	prefix string          // the stream's creation time, in Unix nanoseconds
	events []atomic.Uint64 // per partition, kept current by watch
	fences []fence         // per partition: the ownership epoch held (fence.go)
	log    *slog.Logger
	mu     sync.Mutex // serialises writes of one instance
}

func ensureProgress(ctx context.Context, js jetstream.JetStream, rp replicaPolicy) (jetstream.KeyValue, error) {
	return ensureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      ProgressBucket,
		Description: "bookline side-effect watermarks: outcome events published per partition, Google mirror confirmed per calendar",
		Storage:     jetstream.FileStorage,
		Replicas:    rp.want,
	}, rp)
}

func newProgress(kv jetstream.KeyValue, created time.Time, partitions int, log *slog.Logger) *progress {
	return &progress{kv: kv, prefix: strconv.FormatInt(created.UnixNano(), 10), events: make([]atomic.Uint64, partitions),
		fences: make([]fence, partitions), log: log.With("component", "progress")}
}

func (g *progress) eventKey(p int) string       { return "evt." + g.prefix + "." + strconv.Itoa(p) }
func (g *progress) mirrorKey(cal string) string { return "gsync." + g.prefix + "." + cal }

func encodeSeq(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func decodeSeq(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// watch keeps the event watermarks current until ctx ends.
func (g *progress) watch(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := g.kv.Watch(ctx, "evt."+g.prefix+".*")
		if err != nil {
			g.log.Warn("watching the event watermarks", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			p, err := strconv.Atoi(e.Key()[strings.LastIndexByte(e.Key(), '.')+1:])
			if err != nil || p < 0 || p >= len(g.events) {
				continue
			}
			seq := decodeSeq(e.Value())
			for {
				old := g.events[p].Load()
				if seq <= old || g.events[p].CompareAndSwap(old, seq) {
					break
				}
			}
		}
		_ = w.Stop()
	}
}

// eventsDone is the partition's event watermark as last seen.
func (g *progress) eventsDone(p int) uint64 {
	if p < 0 || p >= len(g.events) {
		return 0
	}
	return g.events[p].Load()
}

// confirmEvents raises partition p's event watermark to seq.
func (g *progress) confirmEvents(ctx context.Context, p int, seq uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if seq <= g.eventsDone(p) {
		return nil
	}
	if _, err := g.kv.Put(ctx, g.eventKey(p), encodeSeq(seq)); err != nil {
		return err
	}
	for {
		old := g.events[p].Load()
		if seq <= old || g.events[p].CompareAndSwap(old, seq) {
			return nil
		}
	}
}

// mirrorDone is the sequence up to which Google confirmed calendar cal's
// mirror operations (0: none known).
func (g *progress) mirrorDone(ctx context.Context, cal string) (uint64, error) {
	e, err := g.kv.Get(ctx, g.mirrorKey(cal))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return decodeSeq(e.Value()), nil
}

// confirmMirror records that Google has calendar cal's operations up to seq.
func (g *progress) confirmMirror(ctx context.Context, cal string, seq uint64) error {
	_, err := g.kv.Put(ctx, g.mirrorKey(cal), encodeSeq(seq))
	return err
}

// MirrorConfirmed is the stream sequence up to which Google confirmed
// calendar calID's mirror operations, as recorded for the whole cluster (0
// and nil outside cluster mode: this instance's outbox is the only record).
func (n *Node) MirrorConfirmed(ctx context.Context, calID string) (uint64, error) {
	if n.progress == nil {
		return 0, nil
	}
	return n.progress.mirrorDone(ctx, calID)
}

// ConfirmMirror records for the whole cluster that Google has calendar
// calID's mirror operations up to stream sequence seq (nothing outside
// cluster mode).
func (n *Node) ConfirmMirror(ctx context.Context, calID string, seq uint64) error {
	if n.progress == nil {
		return nil
	}
	return n.progress.confirmMirror(ctx, calID, seq)
}

// OwnsCalendar reports whether this instance sends calID's side effects
// (mirrors it to Google, reads its busy time): outside cluster mode always,
// in cluster mode while it consumes the calendar's partition.
func (n *Node) OwnsCalendar(calID string) bool {
	if n.cluster == nil || len(n.parts) == 0 {
		return true
	}
	return n.parts[PartitionOf(calID, len(n.parts))].active.Load()
}
