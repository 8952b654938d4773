package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/data"
)

// ReplayOptions bound a replay of the command stream.
type ReplayOptions struct {
	// ToSeq stops after this stream sequence (0: the stream's last sequence
	// when the replay starts).
	ToSeq uint64
	// ToTime, when set, stops before the first command stored after it.
	ToTime time.Time
	// StopAt, when set, applies partition p's commands only up to
	// StopAt[p] (used by verify to rebuild the exact point a live index
	// is at).
	StopAt map[int]uint64
	// Continue replays into an index restored from a snapshot of this
	// stream (RestoreNewest) instead of an empty one: each partition
	// applies only the commands after what the index covers.
	Continue bool
	// Progress, when set, is called after every committed chunk.
	Progress func(applied, seq, last uint64)
	// Deciders is how many goroutines decide a chunk's partitions side
	// by side, each in a data.Fork (see decideChunk); 0 means
	// GOMAXPROCS.
	Deciders int
}

// ReplayStats describes a finished replay.
type ReplayStats struct {
	Applied uint64 // commands applied
	LastSeq uint64 // last stream sequence read
	Elapsed time.Duration
	// Committing is the time the committer spent deciding and writing
	// chunks, the rest of Elapsed it waited for the reader: near Elapsed,
	// the committer is what bounds the replay.
	Committing time.Duration
}

// ErrIndexNotEmpty is returned when replaying into an index that already
// holds state.
var ErrIndexNotEmpty = errors.New("queue: replay needs a new, empty index")

// ReplayChunk is how many commands one replay transaction decides at most.
// Chunks start at firstReplayChunk and double: the committer starts
// applying early instead of waiting for a whole chunk to be read and
// decoded, and large chunks later rewrite fewer pages per command. A
// chunk's tree writes are put into bbolt ReplayFlushKeys at a time: one
// transaction that rewrites most leaves leaves as many free pages in the
// file (1M bookings over 10,000 calendars: 131,072 commands in one
// transaction, 428 bytes per booking; flushed 16,384 keys at a time, 268).
// Exported for the benchmarks that build an index as a replay does.
const (
	ReplayChunk      = 131072
	firstReplayChunk = 1024
	ReplayFlushKeys  = 16384
	// replayPull is how many messages the replay's consumer keeps
	// fetched ahead: enough to keep the reader busy, not a chunk's worth
	// (a chunk is read while the previous one is committed).
	replayPull = 65536
)

// Replay rebuilds an index from the command stream with the same decode and
// decisions the writers use (actor.ApplyReplay), but sends no replies, queues
// no events and has no side effects. It refuses (ErrHistoryMissing) a
// stream whose first messages were removed.
//
// Only the last transaction is fsynced; the ones before it are written
// without (data.Store.CommitUnsynced). The store must therefore be a new
// index that is thrown away when Replay fails or the process stops before
// it returns: a replay is redone from scratch, never resumed. The last
// transaction alone records the stream's identity.
func Replay(ctx context.Context, js jetstream.JetStream, store *data.Store, opt ReplayOptions) (ReplayStats, error) {
	began := time.Now()
	var st ReplayStats
	s, err := js.Stream(ctx, StreamName)
	if err != nil {
		return st, fmt.Errorf("queue: command stream: %w", err)
	}
	info := s.CachedInfo()
	identity := streamIdentity(info)
	partitions, err := defaultPartitions(ctx, js, false)
	if err != nil {
		return st, err
	}
	covered, err := replayCovered(store, partitions, identity, opt.Continue)
	if err != nil {
		return st, err
	}
	if !opt.Continue {
		// Nearly every lookup of a replay is of a request id or booking id
		// that is new: a filter of the keys written answers those
		// without a walk of the trees. About one key per command; past
		// 64M keys the filter only answers "maybe" more often (96 MB).
		if err := store.TrackKeys(int(min(info.State.Msgs, 1<<26))); err != nil {
			return st, err
		}
		defer store.ForgetKeys()
	}
	// Everything is decided with this build's time zone data.
	if err := store.CommitUnsynced(func(tx *data.Tx) error { _, err := tx.NoteTzdata(zones.Version); return err }); err != nil {
		return st, err
	}
	last := info.State.LastSeq
	if opt.ToSeq > 0 && opt.ToSeq < last {
		last = opt.ToSeq
	}
	from, err := replayFrom(ctx, s, info, store, partitions, covered, opt.Continue)
	if err != nil {
		return st, err
	}
	if last == 0 || last < info.State.FirstSeq || last <= from {
		return st, store.Commit(func(tx *data.Tx) error { return tx.SetStreamIdentity(identity) })
	}
	// No filter: the stream holds only commands, and an unfiltered
	// consumer spares the server a subject match per message.
	occ := jetstream.OrderedConsumerConfig{}
	if from > 0 {
		occ.DeliverPolicy, occ.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from+1
	}
	cons, err := js.OrderedConsumer(ctx, StreamName, occ)
	if err != nil {
		return st, fmt.Errorf("queue: replay consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(replayPull))
	if err != nil {
		return st, err
	}
	defer it.Stop()

	// Reading and decoding (here) overlap with applying and committing the
	// previous chunk (commitReplay's goroutine): a two-stage pipeline.
	jobs := make(chan replayJob, 1)
	committed := make(chan error, 1)
	deciders := opt.Deciders
	if deciders <= 0 {
		deciders = runtime.GOMAXPROCS(0)
	}
	go func() { committed <- commitReplay(store, identity, opt.Progress, deciders, jobs, &st) }()
	readErr := feedReplay(ctx, it, s, info, partitions, from, last, covered, opt, jobs, &st)
	close(jobs)
	err = <-committed
	if readErr != nil {
		return st, readErr
	}
	st.Elapsed = time.Since(began)
	return st, err
}

// feedReplay reads the stream from from+1 to last (or opt's end), decodes
// each partition's commands into chunks (doubling from firstReplayChunk up
// to ReplayChunk) and hands them to the committer on jobs, the last one
// marked final once the read is complete. It counts what it read in
// st.LastSeq.
func feedReplay(ctx context.Context, it jetstream.MessagesContext, s jetstream.Stream, info *jetstream.StreamInfo, partitions int,
	from, last uint64, covered map[int]uint64, opt ReplayOptions, jobs chan<- replayJob, st *ReplayStats) error {
	// The skips every writer looked up before it decided a command that
	// may have been skipped: the system tokens as they are now.
	sys := make([]*systemLog, partitions)
	for p := range sys {
		sys[p] = newSystemLog(s, p, partitions)
		sys[p].static = true
	}
	never := func() int { return 0 }
	var chunk [][]actor.Decoded
	pending, size := 0, firstReplayChunk
	// Sequences the consumer passed over: deleted ones, or messages the
	// server cannot read (it skips them without a word).
	skipped := &skippedSeqs{next: max(from+1, firstSeq(info))}
	for st.LastSeq < last {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := it.Next()
		if err != nil {
			return fmt.Errorf("queue: replay read: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		seq := meta.Sequence.Stream
		if seq > last || (!opt.ToTime.IsZero() && meta.Timestamp.After(opt.ToTime)) {
			break
		}
		st.LastSeq = seq
		skipped.saw(seq)
		if meta.NumPending == 0 {
			last = seq // nothing more stored (the last sequences may be deleted)
		}
		p, cal, ok := parseStoredSubject(m.Subject())
		if !ok || (opt.StopAt != nil && seq > opt.StopAt[p]) || seq <= covered[p] {
			continue
		}
		if p >= len(chunk) {
			chunk = append(chunk, make([][]actor.Decoded, p+1-len(chunk))...)
		}
		chunk[p] = append(chunk[p], actor.Decode(actor.Input{Seq: seq, At: meta.Timestamp, SubjectCalendar: cal,
			Schema: m.Headers().Get(HeaderSchema), Data: m.Data(), Partitions: partitions}))
		if p < len(sys) {
			if err := sys[p].mark(ctx, chunk[p][len(chunk[p])-1:], never); err != nil {
				return err
			}
		}
		if pending++; pending >= size {
			jobs <- replayJob{chunk: chunk, n: pending, lastSeq: seq, last: last}
			chunk, pending, size = nil, 0, min(2*size, ReplayChunk)
		}
	}
	if err := skipped.check(ctx, s); err != nil {
		return err
	}
	jobs <- replayJob{chunk: chunk, n: pending, lastSeq: st.LastSeq, last: last, final: true}
	return nil
}

// replayCovered reads how far each partition's history is in the index:
// nothing for a new replay, which needs an empty index; what a restored
// snapshot applied when the replay continues it, which needs the index to
// come from this stream.
func replayCovered(store *data.Store, partitions int, identity string, cont bool) (map[int]uint64, error) {
	var (
		empty   bool
		known   string
		covered = map[int]uint64{}
	)
	if err := store.View(func(tx *data.Tx) error {
		empty = len(tx.Applied()) == 0 && len(tx.CalendarIDs()) == 0
		known = tx.StreamIdentity()
		for p := 0; p < partitions; p++ {
			covered[p] = tx.Covered(p)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	switch {
	case cont && known != identity:
		return nil, fmt.Errorf("%w: the index to continue was built from stream %q, the stream is %q", ErrIndexNotEmpty, known, identity)
	case !cont && !empty:
		return nil, ErrIndexNotEmpty
	case !cont:
		clear(covered)
	}
	return covered, nil
}

// replayFrom is the lowest sequence any partition still needs, - 1. An
// index from a stream whose start is gone would lack those commands'
// bookings and request records: it refuses rather than build it (ordered
// consumers start at the first message there is, without a word). A
// continued replay also needs the restored index's recorded history to be
// the stream's.
func replayFrom(ctx context.Context, s jetstream.Stream, info *jetstream.StreamInfo, store *data.Store, partitions int,
	covered map[int]uint64, cont bool) (uint64, error) {
	if !cont {
		return 0, historyGap(-1, 0, firstSeq(info))
	}
	from := covered[0]
	for p := 0; p < partitions; p++ {
		if err := historyGap(p, covered[p], firstSeq(info)); err != nil {
			return 0, err
		}
		from = min(from, covered[p])
	}
	return from, checkRestoredHistory(ctx, s, info, store, partitions)
}

// replayJob is a chunk of a replay, decoded and grouped by partition.
type replayJob struct {
	chunk   [][]actor.Decoded // by partition
	n       int
	lastSeq uint64
	last    uint64 // the replay's end, for progress
	final   bool
}

// commitReplay applies and commits the replay's chunks as they come, until
// jobs is closed, and returns the first error (it keeps receiving after
// one, so that the reader never blocks). It counts what it applied in
// st.Applied.
func commitReplay(store *data.Store, identity string, progress func(applied, seq, last uint64), deciders int,
	jobs <-chan replayJob, st *ReplayStats) error {
	kept := data.NewPending()
	var err error
	for j := range jobs {
		if err != nil {
			continue
		}
		// A chunk is decided with its tree writes kept aside (see
		// decideChunk), then written in transactions of ReplayFlushKeys
		// keys (see data.Pending). All of them are committed without
		// fsync: the index is new and a replay that does not finish is
		// started again from scratch, never resumed. After the final
		// chunk one commit with fsync (which flushes every earlier page
		// before it writes its meta page) records the stream identity:
		// an index without one is not a finished replay.
		began := time.Now()
		err = decideChunk(store, kept, j.chunk, deciders)
		if err == nil {
			err = store.FlushPending(kept, ReplayFlushKeys)
		}
		if err == nil && j.final {
			err = store.Commit(func(tx *data.Tx) error { return tx.SetStreamIdentity(identity) })
		}
		st.Committing += time.Since(began)
		if err == nil {
			st.Applied += uint64(j.n)
			if progress != nil {
				progress(st.Applied, j.lastSeq, j.last)
			}
		}
	}
	return err
}

// checkRestoredHistory compares every partition's recorded history in
// store (a restored snapshot) with the stream.
func checkRestoredHistory(ctx context.Context, s jetstream.Stream, info *jetstream.StreamInfo, store *data.Store, partitions int) error {
	var hists map[int]data.History
	if err := store.View(func(tx *data.Tx) (err error) { hists, err = tx.Histories(); return err }); err != nil {
		return err
	}
	for p := 0; p < partitions; p++ {
		e, err := checkHistory(ctx, s, info, p, hists[p])
		if err != nil {
			return err
		}
		if e != nil {
			return e
		}
	}
	return nil
}

// skippedSeqs notes the stream sequences a replay's consumer did not
// deliver, up to skippedKept ranges.
type skippedSeqs struct {
	next   uint64
	ranges [][2]uint64
}

const skippedKept = 1024

func (k *skippedSeqs) saw(seq uint64) {
	if seq > k.next && len(k.ranges) < skippedKept {
		k.ranges = append(k.ranges, [2]uint64{k.next, seq - 1})
	}
	k.next = seq + 1
}

// check refuses a replay that passed over a message the stream never
// deleted: the server skips a message whose stored copy fails its
// checksum (a damaged block file), and an index built without it would
// lack the command.
func (k *skippedSeqs) check(ctx context.Context, s jetstream.Stream) error {
	if len(k.ranges) == 0 {
		return nil
	}
	info, err := s.Info(ctx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return fmt.Errorf("queue: stream info: %w", err)
	}
	deleted := make(map[uint64]bool, len(info.State.Deleted))
	for _, d := range info.State.Deleted {
		deleted[d] = true
	}
	var unreadable []uint64
	for _, r := range k.ranges {
		for seq := r[0]; seq <= r[1] && len(unreadable) < 16; seq++ {
			if !deleted[seq] {
				unreadable = append(unreadable, seq)
			}
		}
	}
	if len(unreadable) == 0 {
		return nil
	}
	return &DamagedStreamError{Seqs: unreadable}
}
