package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Altered history. The index records what each partition applied: the
// hash of its last message, a hash chain over all of them with a
// checkpoint every data.CheckpointEvery messages, and the hashes of the
// recent ones (data/chain.go). A stream whose history below what the index
// applied is not that history any more (a NATS node's block files damaged
// or truncated, a store restored from an older copy, a leader that serves
// another history) is refused, naming the first differing sequence,
// instead of being replayed as truth: where the writer starts
// (reconcileIndex), where a cluster instance catches up (catchUp), where a
// snapshot is restored (restoreCandidate) and in `bookline verify`.

// ErrHistoryDiffers is returned when the command stream's history differs
// from what an index applied.
var ErrHistoryDiffers = errors.New("queue: the command stream's history differs from what the index applied")

// HistoryMismatchError names where the command stream's history first
// differs from what a partition's index applied, as far as the index can
// tell. It matches ErrHistoryDiffers.
type HistoryMismatchError struct {
	Partition int
	// Seq is the first differing stream sequence found. When Exact it is
	// the first difference; otherwise the first difference lies after
	// After and at or before Seq (the index keeps the hash of every
	// message only for the recent ones, and a checkpoint of its chain
	// every data.CheckpointEvery messages before them).
	Seq   uint64
	After uint64
	Exact bool
	// What says what the stream has at Seq.
	What string
	// Applied is the index's applied sequence.
	Applied uint64
	// Tail is set when the message the index applied last is not in the
	// stream as it was applied (missing, another message, or past the
	// stream's end): what changed reaches up to the end of what the index
	// applied, as when a stream loses its unsynced tail.
	Tail bool
}

func (e *HistoryMismatchError) Error() string {
	return fmt.Sprintf("%v: partition %d at %s. "+
		"Not serving the partition from a history that changed: restore the NATS store from a healthy replica or a backup and restart, "+
		"or, to accept the stream's history as it is now and rebuild the partition from it (what the index applied that the stream "+
		"no longer has is lost), restart with --accept-stream-history=%s",
		ErrHistoryDiffers, e.Partition, e.where(), e.AcceptKey())
}

// where says where and how the history differs.
func (e *HistoryMismatchError) where() string {
	at := fmt.Sprintf("stream seq %d", e.Seq)
	switch {
	case e.Exact && e.After > 0:
		at += fmt.Sprintf(" (the first difference: the partition's history matches through its message before it, seq %d)", e.After)
	case e.Exact:
		at += " (the first difference: it is the partition's first message)"
	case e.After > 0:
		at += fmt.Sprintf(" (the first difference lies after seq %d, where the history still matches, and at or before this one)", e.After)
	default:
		at += " (the first difference found; it may lie before this one)"
	}
	return fmt.Sprintf("%s: %s; the index applied through seq %d", at, e.What, e.Applied)
}

func (e *HistoryMismatchError) Unwrap() error { return ErrHistoryDiffers }

// Summary says where and how the history differs, without the advice.
func (e *HistoryMismatchError) Summary() string { return "first differing " + e.where() }

// AcceptKey names this mismatch for NodeConfig.AcceptHistory:
// <partition>@<seq>.
func (e *HistoryMismatchError) AcceptKey() string { return fmt.Sprintf("%d@%d", e.Partition, e.Seq) }

// ParseAcceptHistory reads a list of AcceptKey values separated by commas
// (e.g. "3@19,5@2048"): the partitions whose stream history an operator
// accepts, each at the first differing sequence it was refused for.
func ParseAcceptHistory(s string) (map[int]uint64, error) {
	out := map[int]uint64{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		ps, ss, ok := strings.Cut(item, "@")
		p, perr := strconv.Atoi(ps)
		seq, serr := strconv.ParseUint(ss, 10, 64)
		if !ok || perr != nil || serr != nil || p < 0 || seq == 0 {
			return nil, fmt.Errorf("accept stream history: %q is not <partition>@<seq> (as the refusal names it)", item)
		}
		out[p] = seq
	}
	return out, nil
}

// DamagedStreamError names messages of the command stream that the server
// passes over although they were never deleted: it cannot read them (their
// stored copy fails its checksum). It matches ErrHistoryDiffers.
type DamagedStreamError struct {
	Seqs []uint64 // the first ones found, in order
}

func (e *DamagedStreamError) Error() string {
	return fmt.Sprintf("%v: stream seq %d cannot be read (the server skips it; it was never deleted: its stored copy is damaged)%s; "+
		"refusing to build an index without it: restore the NATS store from a healthy replica or a backup",
		ErrHistoryDiffers, e.Seqs[0], more(e.Seqs[1:]))
}

func more(seqs []uint64) string {
	if len(seqs) == 0 {
		return ""
	}
	return fmt.Sprintf(", and so can %v", seqs)
}

func (e *DamagedStreamError) Unwrap() error { return ErrHistoryDiffers }

// historyPolicy is what a start does with a partition whose stream history
// differs from its index.
type historyPolicy struct {
	// lostTail: the stream may lose its unsynced tail and with it answered
	// commands (embedded --sync interval, or a cluster whose servers
	// acknowledge before they sync, --allow-lazy-nats-sync: explicit
	// opt-outs): a mismatch that reaches up to the applied sequence (Tail)
	// is that, and the partition is rebuilt from what the stream kept.
	lostTail bool
	// accept lists, per partition, the first differing sequence an
	// operator accepted (NodeConfig.AcceptHistory).
	accept map[int]uint64
}

// allows says whether the policy rebuilds the partition of mismatch e
// (rebuild, without its log line).
func (h historyPolicy) allows(e *HistoryMismatchError) bool {
	return h.lostTail && e.Tail || h.accepts(e)
}

func (h historyPolicy) accepts(e *HistoryMismatchError) bool {
	seq, ok := h.accept[e.Partition]
	return ok && seq == e.Seq
}

// rebuild says why the partition of mismatch e is to be rebuilt from the
// stream as it is (a lost tail the policy expects, or a difference the
// operator accepted, which it logs loudly), or "" when it is refused.
func (h historyPolicy) rebuild(e *HistoryMismatchError, log *slog.Logger) string {
	switch {
	case h.lostTail && e.Tail:
		// --sync interval or lazy NATS servers: the stream lost what it
		// had not synced, answered commands included (the documented
		// price of either opt-out).
		return "the stream lost its unsynced tail (--sync interval or --allow-lazy-nats-sync): " + e.Summary()
	case h.accepts(e):
		log.Error("STREAM HISTORY ACCEPTED BY THE OPERATOR: rebuilding the partition from the stream as it is now; "+
			"what the index applied that the stream no longer has is lost", "partition", e.Partition, "first_differing_seq", e.Seq,
			"what", e.What, "index_applied_seq", e.Applied)
		return "its history, accepted by the operator: " + e.Summary()
	}
	return ""
}

// checkHistory compares what the index recorded of partition p's log (hist)
// with the stream: the message at the applied sequence, the message at
// each checkpoint the stream still holds, and every recent message. It
// returns the first difference, or nil.
func checkHistory(ctx context.Context, s jetstream.Stream, info *jetstream.StreamInfo, p int, hist data.History) (*HistoryMismatchError, error) {
	head := hist.Head
	if head.Seq == 0 {
		return nil, nil
	}
	first, last := firstSeq(info), info.State.LastSeq
	found := func(e *HistoryMismatchError, tail bool) (*HistoryMismatchError, error) {
		e.Partition, e.Applied, e.Tail = p, head.Seq, tail
		return e, nil
	}
	// The message applied last: one request, and whether what changed
	// reaches up to it.
	var atApplied *HistoryMismatchError
	if head.Seq >= first {
		what, err := messageDiffers(ctx, s, p, head.Seq, last, head.Hash)
		if err != nil {
			return nil, err
		}
		if what != "" {
			atApplied = &HistoryMismatchError{Seq: head.Seq, What: what}
		}
	}
	tail := atApplied != nil
	recent := hist.Recent
	for len(recent) > 0 && recent[0].Seq < first {
		recent = recent[1:] // trimmed from the stream: nothing to compare
	}
	// Checkpoints before the recent messages, oldest first.
	var after uint64
	for _, c := range hist.Checkpoints {
		if c.Seq < first {
			continue
		}
		if len(recent) > 0 && c.Seq >= recent[0].Seq {
			break
		}
		what, err := messageDiffers(ctx, s, p, c.Seq, last, c.Hash)
		if err != nil {
			return nil, err
		}
		if what != "" {
			return found(&HistoryMismatchError{Seq: c.Seq, After: after, What: what}, tail)
		}
		after = c.Seq
	}
	if len(recent) > 0 {
		// Exact from the first recent message on when they reach back to
		// the partition's first message.
		whole := head.Origin == 0 && int(head.Count) == len(hist.Recent) && len(recent) == len(hist.Recent)
		e, err := compareRecent(ctx, s, p, recent, last, whole)
		if err != nil || e != nil {
			if e != nil {
				if !e.Exact && e.After == 0 {
					e.After = after
				}
				return found(e, tail)
			}
			return nil, err
		}
	}
	if atApplied != nil {
		atApplied.After = after
		return found(atApplied, true)
	}
	// The checks above read the recent messages and the checkpoints, not
	// every older message. But the command stream denies deletes and is
	// trimmed only from its front, so a message the server counts as
	// deleted inside the history the index applied was lost by its store
	// (a truncated block file), or by the replica that served it: under
	// the fault suite a minority node with a truncated block, made
	// leader, lost hundreds of acknowledged messages older than every
	// recent one.
	if info.State.NumDeleted > 0 {
		d, err := firstDeleted(ctx, s, first, head.Seq)
		if err != nil {
			return nil, err
		}
		if d > 0 {
			return found(&HistoryMismatchError{Seq: d, What: "the stream counts this message as deleted, inside the history the index applied, " +
				"although it denies deletes and is trimmed only from its front (a damaged or truncated store); it may have been another partition's"}, false)
		}
	}
	return nil, nil
}

// firstDeleted is the lowest sequence in [from, to] that the stream counts
// as deleted, 0 when there is none.
func firstDeleted(ctx context.Context, s jetstream.Stream, from, to uint64) (uint64, error) {
	info, err := s.Info(ctx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return 0, fmt.Errorf("queue: stream info: %w", err)
	}
	var d uint64
	for _, seq := range info.State.Deleted {
		if seq >= from && seq <= to && (d == 0 || seq < d) {
			d = seq
		}
	}
	return d, nil
}

// CheckHistory compares what an index recorded of partition p's log
// (data.Tx.History, or a digest's History) with the command stream, as a
// start does, and returns the first difference, or nil.
func CheckHistory(ctx context.Context, js jetstream.JetStream, p int, h data.History) (*HistoryMismatchError, error) {
	s, err := js.Stream(ctx, StreamName)
	if err != nil {
		return nil, fmt.Errorf("queue: command stream: %w", err)
	}
	return checkHistory(ctx, s, s.CachedInfo(), p, h) // the lookup fetched the info just now
}

// messageDiffers describes how the stream's message at seq differs from
// partition p's message with hash (nil: not known) that the index applied
// there; "" when it does not.
func messageDiffers(ctx context.Context, s jetstream.Stream, p int, seq, last uint64, hash []byte) (string, error) {
	if seq > last {
		return fmt.Sprintf("the stream ends at seq %d, before it", last), nil
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "the stream does not have the message the index applied there (removed, lost, or damaged so that the server cannot read it)", nil
	}
	if err != nil {
		return "", fmt.Errorf("queue: read stream seq %d: %w", seq, err)
	}
	mp, cal, ok := parseStoredSubject(m.Subject)
	if !ok || mp != p {
		return fmt.Sprintf("the stream has a message of %s there, not of partition %d", m.Subject, p), nil
	}
	if hash != nil {
		return storedDiffers(hash, m.Subject, cal, m.Time, m.Data), nil
	}
	return "", nil
}

// storedDiffers describes how the stored message (subject, of calendar
// cal, stored at, with data) differs from the one with hash that the
// index applied there; "" when it is that one.
func storedDiffers(hash []byte, subject, cal string, at time.Time, data []byte) string {
	if bytes.Equal(hash, actor.MessageHash(actor.Input{At: at, SubjectCalendar: cal, Data: data})) {
		return ""
	}
	return fmt.Sprintf("the stream has another message there (%s, stored %s) than the one the index applied",
		subject, at.UTC().Format(time.RFC3339Nano))
}

// skippedMessage is what the stream has at a message that a read of the
// partition passed over: what a read by its sequence finds, or, when that
// finds it intact, that the server skips it.
func skippedMessage(ctx context.Context, s jetstream.Stream, p int, want data.Link, last uint64) (string, error) {
	what, err := messageDiffers(ctx, s, p, want.Seq, last, want.Hash)
	if err == nil && what == "" {
		what = "the server skips this message when it reads the partition's messages (damaged?)"
	}
	return what, err
}

// historyQuiet is how long compareRecent waits for the consumer's next
// message before it reads the rest one by one (compareDirect): a cluster
// that has just healed can take seconds to start delivering, and a server
// never delivers a message it cannot read, so a quiet consumer proves
// nothing either way.
var historyQuiet = 2 * time.Second // a variable for tests of compareDirect

// compareRecent reads partition p's messages from the first recent one on
// and compares them with recent, one by one: the index applied every
// message of the partition in that range, so the stream must hold exactly
// those. whole says that recent reaches back to the partition's first
// message.
func compareRecent(ctx context.Context, s jetstream.Stream, p int, recent []data.Link, last uint64, whole bool) (*HistoryMismatchError, error) {
	end := recent[len(recent)-1].Seq
	// The first index of recent not yet matched, and the mismatch at it.
	i := 0
	differsAt := func(i int, seq uint64, what string) *HistoryMismatchError {
		e := &HistoryMismatchError{Seq: seq, What: what, Exact: i > 0 || whole}
		if i > 0 {
			e.After = recent[i-1].Seq
		}
		return e
	}
	differs := func(seq uint64, what string) *HistoryMismatchError { return differsAt(i, seq, what) }
	missing := func() (*HistoryMismatchError, error) {
		what, err := skippedMessage(ctx, s, p, recent[i], last)
		if err != nil {
			return nil, err
		}
		return differs(recent[i].Seq, what), nil
	}
	filter := partitionFilter(p)
	if _, err := s.GetMsg(ctx, recent[0].Seq, jetstream.WithGetMsgSubject(filter)); errors.Is(err, jetstream.ErrMsgNotFound) {
		return missing() // nothing of the partition from there on
	} else if err != nil {
		return nil, fmt.Errorf("queue: read partition %d from seq %d: %w", p, recent[0].Seq, err)
	}
	oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    recent[0].Seq,
	})
	if err != nil {
		return nil, fmt.Errorf("queue: history check consumer: %w", err)
	}
	it, err := oc.Messages(jetstream.PullMaxMessages(min(len(recent)+1, 2*catchUpChunk)))
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	for i < len(recent) {
		nctx, cancel := context.WithTimeout(ctx, historyQuiet)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			it.Stop()
			return compareDirect(ctx, s, p, recent, i, last, differsAt)
		}
		if err != nil {
			return nil, fmt.Errorf("queue: history check of partition %d: %w", p, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		seq := meta.Sequence.Stream
		if seq > end {
			break
		}
		if recent[i].Seq < seq {
			// The consumer passed over a message the index applied. Its
			// server may be a replica that lacks it (one restarted or
			// cut off, still catching up), so that proves nothing yet:
			// the stream leader is asked, message by message.
			it.Stop()
			return compareDirect(ctx, s, p, recent, i, last, differsAt)
		}
		if recent[i].Seq > seq {
			return differs(seq, "the stream has a message of the partition there that the index never applied"), nil
		}
		_, cal, _ := parseStoredSubject(m.Subject())
		if what := storedDiffers(recent[i].Hash, m.Subject(), cal, meta.Timestamp, m.Data()); what != "" {
			return differs(seq, what), nil
		}
		i++
		if meta.NumPending == 0 {
			break
		}
	}
	if i < len(recent) {
		// The consumer ended before the index's messages did: ask the
		// leader, as above.
		it.Stop()
		return compareDirect(ctx, s, p, recent, i, last, differsAt)
	}
	return nil, nil
}

// compareDirect goes on from recent[i] as compareRecent does, with one
// direct read per message instead of a consumer: the partition's next
// message after the one matched last. It names a message the server will
// not return (damaged: its stored copy fails its checksum), one that
// differs, and one of the partition that the index never applied.
func compareDirect(ctx context.Context, s jetstream.Stream, p int, recent []data.Link, i int, last uint64,
	differs func(i int, seq uint64, what string) *HistoryMismatchError) (*HistoryMismatchError, error) {
	filter := partitionFilter(p)
	from := recent[i].Seq
	if i > 0 {
		from = recent[i-1].Seq + 1
	}
	for ; i < len(recent); i++ {
		want := recent[i]
		m, err := s.GetMsg(ctx, from, jetstream.WithGetMsgSubject(filter))
		switch {
		case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, fmt.Errorf("queue: read partition %d from seq %d: %w", p, from, err)
		case err == nil && m.Sequence < want.Seq:
			return differs(i, m.Sequence, "the stream has a message of the partition there that the index never applied"), nil
		case err != nil || m.Sequence > want.Seq: // nothing of the partition there, or not that one
			what, err := skippedMessage(ctx, s, p, want, last)
			if err != nil {
				return nil, err
			}
			return differs(i, want.Seq, what), nil
		}
		_, cal, _ := parseStoredSubject(m.Subject)
		if what := storedDiffers(want.Hash, m.Subject, cal, m.Time, m.Data); what != "" {
			return differs(i, want.Seq, what), nil
		}
		from = want.Seq + 1
	}
	return nil, nil
}

// acceptKeys lists the refusals' AcceptKey values, for the one flag value
// that accepts them all.
func acceptKeys(refused map[int]*HistoryMismatchError) string {
	keys := make([]string, 0, len(refused))
	for _, p := range slices.Sorted(maps.Keys(refused)) {
		keys = append(keys, refused[p].AcceptKey())
	}
	return strings.Join(keys, ",")
}
