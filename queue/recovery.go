package queue

import (
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

	"github.com/bookline/bookline/data"
)

// parseStoredSubject splits bookline.part.<p>.<calendar>.
func parseStoredSubject(subj string) (partition int, cal string, ok bool) {
	rest, ok := strings.CutPrefix(subj, PartitionSubjectPrefix)
	if !ok {
		return 0, "", false
	}
	ps, cal, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, "", false
	}
	p, err := strconv.Atoi(ps)
	return p, cal, err == nil
}

// streamIdentity names one incarnation of the command stream: a stream
// deleted and created again under the same name is another history.
func streamIdentity(info *jetstream.StreamInfo) string {
	return info.Config.Name + "@" + info.Created.UTC().Format(time.RFC3339Nano)
}

// reconcileIndex compares what the index says it applied with what the
// stream holds, before any writer starts. It returns the partitions it
// reset and those it refuses.
//
// A partition whose stream history differs from what its index applied
// (checkHistory: a message it applied is missing or another one, or the
// stream ends before its applied sequence) is refused: not served, and its
// index left as it is, unless the policy says that the stream may lose
// its unsynced tail and this is such a loss (the difference reaches up to
// the applied sequence), or an operator accepted exactly this difference.
// Then, and when the stream was recreated, the partition is reset: its
// calendars are dropped and it rebuilds from the stream.
//
// It refuses the whole start (ErrHistoryMissing, the index left as it was)
// when the stream no longer holds messages a partition needs: those after
// its applied sequence, or all of them for a partition that builds from
// the start.
func reconcileIndex(ctx context.Context, s jetstream.Stream, store *data.Store, partitions int, log *slog.Logger,
	policy historyPolicy) ([]int, map[int]*HistoryMismatchError, error) {
	var (
		known     string
		applied   map[int]uint64
		horizon   map[int]uint64
		histories map[int]data.History
	)
	if err := store.View(func(tx *data.Tx) (err error) {
		known, applied, horizon = tx.StreamIdentity(), tx.Applied(), tx.Horizons()
		histories, err = tx.Histories()
		return err
	}); err != nil {
		return nil, nil, err
	}
	info, err := streamInfoNotBehind(ctx, s, known, applied)
	if err != nil {
		return nil, nil, err
	}
	identity := streamIdentity(info)
	reasons := map[int]string{}
	refused := map[int]*HistoryMismatchError{}
	recreated := known != "" && known != identity
	if recreated {
		// Another stream, maybe with another partition count: every
		// calendar may now belong to another partition, so every
		// partition starts over, not only those with an applied entry.
		why := fmt.Sprintf("index was built from stream %s, the stream now is %s", known, identity)
		for p := range applied {
			reasons[p] = why
		}
		for p := 0; p < partitions; p++ {
			reasons[p] = why
		}
	}
	for _, p := range slices.Sorted(maps.Keys(applied)) {
		if reasons[p] != "" || applied[p] == 0 {
			continue
		}
		if p >= partitions {
			reasons[p] = fmt.Sprintf("partition %d does not exist with %d partitions", p, partitions)
			continue
		}
		e, err := checkHistory(ctx, s, info, p, histories[p])
		if err != nil {
			return nil, nil, err
		}
		if e != nil {
			if why := policy.rebuild(e, log); why != "" {
				reasons[p] = why
			} else {
				refused[p] = e
			}
		}
	}
	// Whatever is rebuilt or continued must find its history in the
	// stream; otherwise the index would silently lack commands.
	if err := historyGaps(partitions, firstSeq(info), applied, horizon, reasons, refused); err != nil {
		return nil, nil, err
	}
	if info.State.NumDeleted > 0 {
		log.Warn("the command stream has deleted messages inside its history: an index rebuilt from it lacks them",
			"deleted", info.State.NumDeleted, "first_seq", info.State.FirstSeq, "last_seq", info.State.LastSeq)
	}
	rc := reconciled{info: info, known: known, recreated: recreated, partitions: partitions,
		applied: applied, horizon: horizon, reasons: reasons, refused: refused}
	reset, aside, err := rc.commit(store)
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(reset)
	if aside > 0 {
		log.Warn("outcome events of the previous command stream were not published yet; publishing them under its identity",
			"events", aside, "previous_stream", known)
	}
	logReconciled(log, reset, reasons, refused)
	return reset, refused, nil
}

// staleEndTries and staleEndWait bound how often the stream is asked again
// when it ends before what the index applied: at the start (reconcileIndex)
// and before a catch-up (Partition.checkApplied). Right after a
// network partition heals, a deposed stream leader that has not noticed
// yet can answer with its own copy, which stopped when it was cut off: a
// cluster fault test saw "the stream ends at seq 88" at an instance whose
// index had applied seq 184, and the partitions were refused for good
// (or, with a lost tail accepted, would have been rebuilt from the stale
// copy). Only a replicated stream has a leader to be deposed: a single
// server's answer is taken at once. A replicated stream that really lost
// its tail still ends early after staleEndTries answers, about 10 s later.
const staleEndTries = 6

var staleEndWait = 2 * time.Second // a variable for the tests

// streamInfoNotBehind is the stream's info, asked again while the stream
// this index was built from (known) is replicated and ends before a
// partition's applied sequence, at most staleEndTries times.
func streamInfoNotBehind(ctx context.Context, s jetstream.Stream, known string, applied map[int]uint64) (*jetstream.StreamInfo, error) {
	for try := 1; ; try++ {
		info, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("queue: stream info: %w", err)
		}
		behind := false
		for _, seq := range applied {
			behind = behind || seq > info.State.LastSeq
		}
		if !behind || info.Config.Replicas < 2 || known != streamIdentity(info) || try == staleEndTries {
			return info, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(staleEndWait):
		}
	}
}

// historyGaps refuses the start (ErrHistoryMissing) when a partition that
// is served needs messages the stream no longer holds (it starts at
// first): those after its applied sequence, or all of them for one that is
// rebuilt from the start (reasons names it).
func historyGaps(partitions int, first uint64, applied, horizon map[int]uint64, reasons map[int]string,
	refused map[int]*HistoryMismatchError) error {
	var gaps []error
	for p := 0; p < partitions; p++ {
		if refused[p] != nil {
			continue // not served: what it would need does not matter
		}
		from := max(applied[p], horizon[p])
		if reasons[p] != "" {
			from = 0 // rebuilt from the start
		}
		if err := historyGap(p, from, first); err != nil {
			gaps = append(gaps, err)
		}
	}
	if len(gaps) > 0 {
		for _, p := range slices.Sorted(maps.Keys(reasons)) {
			gaps = append(gaps, fmt.Errorf("(partition %d would have been rebuilt from the start: %s)", p, reasons[p]))
		}
		return errors.Join(gaps...)
	}
	return nil
}

// reconciled is what reconcileIndex found: the stream, what the index
// applied, and the partitions to reset (reasons) or refuse.
type reconciled struct {
	info             *jetstream.StreamInfo
	known            string // the stream identity the index was built from
	recreated        bool
	partitions       int
	applied, horizon map[int]uint64
	reasons          map[int]string
	refused          map[int]*HistoryMismatchError
}

// commit records the reconciliation in one transaction: the old stream's
// unpublished events set aside, horizons past the stream's end dropped,
// the partitions reset, checkpoints below the stream's start pruned, and
// the stream's identity. It returns the partitions reset and how
// many events were set aside.
func (rc reconciled) commit(store *data.Store) (reset []int, aside int, err error) {
	identity := streamIdentity(rc.info)
	err = store.Commit(func(tx *data.Tx) error {
		reset = reset[:0]
		if rc.recreated {
			// Unpublished outcome events of the old stream keep its
			// identity; the new stream's sequences start at 1 again.
			var err error
			if aside, err = tx.SetAsideEvents(rc.known); err != nil {
				return err
			}
		}
		// A horizon past the stream's end was read from a stream that
		// has since lost its tail: what refills it is unknown.
		for p, h := range rc.horizon {
			if h > rc.info.State.LastSeq && rc.reasons[p] == "" && rc.refused[p] == nil {
				if err := tx.DropHorizon(p); err != nil {
					return err
				}
			}
		}
		all := rc.recreated // the first reset drops every calendar at once
		for p := range rc.reasons {
			belongs := func(cal string) bool { return PartitionOf(cal, rc.partitions) == p }
			if rc.recreated {
				drop := all
				belongs = func(string) bool { return drop }
				all = false
			}
			if err := tx.ResetPartition(p, belongs); err != nil {
				return err
			}
			reset = append(reset, p)
		}
		// Checkpoints of messages the stream no longer holds (trimmed
		// below a snapshot) can no longer be compared.
		for p := range rc.applied {
			if rc.refused[p] == nil {
				if err := tx.PruneCheckpoints(p, firstSeq(rc.info)); err != nil {
					return err
				}
			}
		}
		return tx.SetStreamIdentity(identity)
	})
	return reset, aside, err
}

// logReconciled reports the partitions reconcileIndex reset and refused.
func logReconciled(log *slog.Logger, reset []int, reasons map[int]string, refused map[int]*HistoryMismatchError) {
	for _, p := range reset {
		log.Error("INDEX AHEAD OF STREAM: not serving this partition from the index; rebuilding it from the stream",
			"partition", p, "reason", reasons[p])
	}
	for _, p := range slices.Sorted(maps.Keys(refused)) {
		log.Error("STREAM HISTORY DIFFERS FROM THE INDEX: not serving this partition", "partition", p, "err", refused[p])
	}
	if len(refused) > 0 {
		log.Error("to accept the stream's history of every refused partition as it is now (rebuilding them from it): "+
			"restart with --accept-stream-history="+acceptKeys(refused), "partitions", slices.Sorted(maps.Keys(refused)))
	}
}
