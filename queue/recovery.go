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
// stream holds, before any writer starts. A partition whose index is ahead
// of the stream (the stream lost its unsynced tail in a power loss, or was
// recreated) is not served from the index: its calendars are dropped and it
// rebuilds from the stream. It returns the partitions it reset.
//
// It refuses (ErrHistoryMissing, the index left as it was) when the stream
// no longer holds messages a partition needs: those after its applied
// sequence, or all of them for a partition that builds from the start.
func reconcileIndex(ctx context.Context, s jetstream.Stream, store *data.Store, partitions int, log *slog.Logger) ([]int, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue: stream info: %w", err)
	}
	identity := streamIdentity(info)
	var (
		known   string
		applied map[int]uint64
		horizon map[int]uint64
		hashes  = map[int][]byte{}
	)
	if err := store.View(func(tx *data.Tx) error {
		known, applied, horizon = tx.StreamIdentity(), tx.Applied(), tx.Horizons()
		for p := range applied {
			_, hashes[p] = tx.AppliedMsg(p)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	reasons := map[int]string{}
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
	for p, a := range applied {
		if reasons[p] != "" {
			continue
		}
		switch {
		case a == 0:
		case p >= partitions:
			reasons[p] = fmt.Sprintf("partition %d does not exist with %d partitions", p, partitions)
		case a > info.State.LastSeq:
			reasons[p] = fmt.Sprintf("index applied up to seq %d but the stream ends at seq %d", a, info.State.LastSeq)
		case a >= info.State.FirstSeq:
			m, err := s.GetMsg(ctx, a)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				reasons[p] = fmt.Sprintf("index applied seq %d, which the stream does not have", a)
				break
			} else if err != nil {
				return nil, fmt.Errorf("queue: read stream seq %d: %w", a, err)
			}
			mp, cal, ok := parseStoredSubject(m.Subject)
			if !ok || mp != p {
				reasons[p] = fmt.Sprintf("stream seq %d is %s, not a message of partition %d: the stream's history differs from the index's", a, m.Subject, p)
				break
			}
			// The right partition, but is it the message that was applied?
			// After a lost tail, new messages refill the same sequences.
			if h := hashes[p]; h != nil && !bytes.Equal(h, actor.MessageHash(actor.Input{Seq: a, At: m.Time, SubjectCalendar: cal, Data: m.Data})) {
				reasons[p] = fmt.Sprintf("stream seq %d (%s, stored %s) is another message than the one the index applied there: the stream lost its tail and new messages refilled it",
					a, m.Subject, m.Time.UTC().Format(time.RFC3339Nano))
			}
		}
	}
	// Whatever is rebuilt or continued must find its history in the
	// stream; otherwise the index would silently lack commands.
	var gaps []error
	for p := 0; p < partitions; p++ {
		from := max(applied[p], horizon[p])
		if reasons[p] != "" {
			from = 0 // rebuilt from the start
		}
		if err := historyGap(p, from, firstSeq(info)); err != nil {
			gaps = append(gaps, err)
		}
	}
	if len(gaps) > 0 {
		for _, p := range slices.Sorted(maps.Keys(reasons)) {
			gaps = append(gaps, fmt.Errorf("(partition %d would have been rebuilt from the start: %s)", p, reasons[p]))
		}
		return nil, errors.Join(gaps...)
	}
	if info.State.NumDeleted > 0 {
		log.Warn("the command stream has deleted messages inside its history: an index rebuilt from it lacks them",
			"deleted", info.State.NumDeleted, "first_seq", info.State.FirstSeq, "last_seq", info.State.LastSeq)
	}
	var (
		reset []int
		aside int
	)
	err = store.Commit(func(tx *data.Tx) error {
		reset = reset[:0]
		if recreated {
			// Unpublished outcome events of the old stream keep its
			// identity; the new stream's sequences start at 1 again.
			var err error
			if aside, err = tx.SetAsideEvents(known); err != nil {
				return err
			}
		}
		// A horizon past the stream's end was read from a stream that
		// has since lost its tail: what refills it is unknown.
		for p, h := range horizon {
			if h > info.State.LastSeq && reasons[p] == "" {
				if err := tx.DropHorizon(p); err != nil {
					return err
				}
			}
		}
		all := recreated // the first reset drops every calendar at once
		for p := range reasons {
			belongs := func(cal string) bool { return PartitionOf(cal, partitions) == p }
			if recreated {
				drop := all
				belongs = func(string) bool { return drop }
				all = false
			}
			if err := tx.ResetPartition(p, belongs); err != nil {
				return err
			}
			reset = append(reset, p)
		}
		return tx.SetStreamIdentity(identity)
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(reset)
	if aside > 0 {
		log.Warn("outcome events of the previous command stream were not published yet; publishing them under its identity",
			"events", aside, "previous_stream", known)
	}
	for _, p := range reset {
		log.Error("INDEX AHEAD OF STREAM: not serving this partition from the index; rebuilding it from the stream",
			"partition", p, "reason", reasons[p])
	}
	return reset, nil
}
