package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
)

// The wire contract. docs/protocol.md documents every name here; they are
// public (importers and admins depend on them), so extend, never rename.
const (
	// StreamName is the command stream: the log every state derives from.
	StreamName = "BOOKLINE_CMD"
	// CommandSubjectPrefix + calendar id is where commands are published.
	CommandSubjectPrefix = "bookline.cmd."
	// PartitionSubjectPrefix + "<partition>.<calendar id>" is the stored
	// subject after the stream's subject transform.
	PartitionSubjectPrefix = "bookline.part."
	// ConsumerPrefix + partition names each partition's durable consumer.
	ConsumerPrefix = "bookline-part-"

	// HeaderReplyTo carries the subject the writer answers on once the
	// command's outcome is committed. JetStream keeps no reply subject of
	// the publisher, so it travels as a header.
	HeaderReplyTo = "Bookline-Reply-To"
	// HeaderReplyBatch, beside HeaderReplyTo, asks for the answer in bulk:
	// the writer sends the answers of one batch that carry the same
	// HeaderReplyBatch subject together, as lines of "<HeaderReplyTo>
	// <reply>\n" in a few messages on that subject, instead of one message
	// per command on HeaderReplyTo. For bulk producers: one message per
	// answer was a visible share of an import's CPU (the writer's publish,
	// the server's routing, the client's read). A writer that does not know
	// the header answers on HeaderReplyTo, so a client handles both.
	HeaderReplyBatch = "Bookline-Reply-Batch"
	// HeaderSchema carries the command schema version ("1").
	HeaderSchema = "Bookline-Schema"
	// HeaderRequestID carries the request id for tracing; the command body's
	// request_id is authoritative.
	HeaderRequestID = "Bookline-Request-Id"
	// HeaderTraceID carries the id of the HTTP request that submitted the
	// command (X-Request-Id), for correlating logs; absent for commands
	// not submitted over HTTP. Informational only.
	HeaderTraceID = "Bookline-Trace-Id"
	// HeaderCommandSeq, on outcome events, is the stream sequence of the
	// command the event reports, within the stream HeaderCommandStream
	// names.
	HeaderCommandSeq = "Bookline-Command-Seq"
	// HeaderCommandStream, on outcome events, names the incarnation of the
	// command stream that sequence belongs to (streamIdentity): a stream
	// deleted and created again numbers its commands from 1 again.
	HeaderCommandStream = "Bookline-Command-Stream"
	// HeaderEventPart, on the outcome events of a collective.commits (one
	// per part it committed, all with its sequence), is the event's
	// position among them, from 1; absent on every other event.
	HeaderEventPart = "Bookline-Event-Part"
	// HeaderEventCount, on an event batch message (EventBatchSubject), is
	// how many events (lines) it carries.
	HeaderEventCount = "Bookline-Event-Count"
	// HeaderContentType is application/json, or application/x-ndjson on
	// an event batch message.
	HeaderContentType = "Content-Type"

	// DuplicateWindow is the stream's Nats-Msg-Id dedupe window. Request
	// records in the index make idempotency last beyond it, so the window
	// only saves storing and deciding a quick re-send; JetStream keeps
	// every id of the window in memory (about 300 bytes each), which at an
	// import's rate is tens of MB per minute of window. Applies to streams
	// created with it: an existing stream keeps its window.
	DuplicateWindow = 30 * time.Second
	// MaxMessageBytes is what the stream accepts; commands over
	// actor.MaxCommandBytes still reach the writer and are rejected there,
	// with a record, instead of vanishing at publish.
	MaxMessageBytes = 1 << 20
)

// ErrPartitionMismatch is returned when the stream exists with another
// partition count than the one configured.
var ErrPartitionMismatch = errors.New("queue: stream partition count differs from --partitions")

// ReplyInboxPrefix starts every subject the writer answers on: nats.go's
// inboxes (_INBOX.…) and custom inbox prefixes of the _INBOX_<name> form.
// The writer publishes with bookline's own permissions, so it must never be
// pointed at a command, event or JetStream API subject.
const ReplyInboxPrefix = "_INBOX"

// ValidReplySubject reports whether the writer may answer on subj.
func ValidReplySubject(subj string) bool {
	rest, ok := strings.CutPrefix(subj, ReplyInboxPrefix)
	return ok && len(rest) > 1 && (rest[0] == '.' || rest[0] == '_') &&
		!strings.ContainsAny(subj, " \t\r\n*>")
}

// CommandSubject is the subject a command for calID is published to.
func CommandSubject(calID string) string { return CommandSubjectPrefix + calID }

// PartitionOf returns the partition the stream's subject transform assigns to
// calID: FNV-1a (32 bit) of the token, modulo n. It matches the server's
// {{partition(n,1)}} and exists for diagnostics and tests; publishers never
// need it.
func PartitionOf(calID string, n int) int { return actor.PartitionOf(calID, n) }

// partitionFilter is the stored-subject filter of partition p.
func partitionFilter(p int) string { return PartitionSubjectPrefix + strconv.Itoa(p) + ".*" }

// calendarOfStoredSubject returns the calendar token of a stored subject
// bookline.part.<p>.<calendar>.
func calendarOfStoredSubject(subj string) string {
	rest, ok := strings.CutPrefix(subj, PartitionSubjectPrefix)
	if !ok {
		return ""
	}
	_, cal, _ := strings.Cut(rest, ".")
	return cal
}

// StreamConfig is the command stream's configuration for n partitions.
func StreamConfig(partitions, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamName,
		Description: "bookline command log (source of truth)",
		Subjects:    []string{CommandSubjectPrefix + "*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source:      CommandSubjectPrefix + "*",
			Destination: transformDestination(partitions),
		},
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		Duplicates: DuplicateWindow,
		MaxMsgSize: MaxMessageBytes,
		Replicas:   replicas,
		// The index and every rebuild of it derive from the whole log:
		// a command removed from it is a booking or request record
		// missing from the next index built. The server never lets
		// these flags be cleared again.
		DenyDelete: true,
		DenyPurge:  true,
	}
}

func transformDestination(n int) string {
	return fmt.Sprintf("%s{{partition(%d,1)}}.{{wildcard(1)}}", PartitionSubjectPrefix, n)
}

// Partition counts of a new command stream when none is configured.
//
// On one machine every partition shares the index's one writer
// transaction, so partitions add no write parallelism; fewer of them make
// each partition's batch, and so each group commit, larger: 2 partitions
// gave ~11% more throughput and a lower p99 than 8 on the `uniform` load
// (6 A/B rounds of 10 s, 64 clients; docs/benchmarks.md). In cluster mode
// partitions are also the unit that instances divide among themselves.
const (
	DefaultPartitions        = 2
	DefaultClusterPartitions = 8
)

// defaultPartitions is the partition count of the existing command stream,
// or for a new one DefaultPartitions (DefaultClusterPartitions in cluster
// mode).
func defaultPartitions(ctx context.Context, js jetstream.JetStream, cluster bool) (int, error) {
	s, err := retryJS(ctx, "stream "+StreamName+" (its partition count)", func(ctx context.Context) (jetstream.Stream, error) {
		s, err := js.Stream(ctx, StreamName)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, nil
		}
		return s, err
	})
	switch {
	case err != nil:
		return 0, err
	case s == nil && cluster:
		return DefaultClusterPartitions, nil
	case s == nil:
		return DefaultPartitions, nil
	}
	if t := s.CachedInfo().Config.SubjectTransform; t != nil {
		for n := 1; n <= 1024; n++ {
			if t.Destination == transformDestination(n) {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("%w: stream %s has no partition transform bookline understands", ErrPartitionMismatch, StreamName)
}

// ErrHistoryMissing is returned when the command stream no longer holds
// messages an index needs: building on what is left would give an index
// without some bookings and request records.
var ErrHistoryMissing = errors.New("queue: the command stream's history does not reach back far enough")

// HistoryGapError names the stream sequences an index needs and the
// command stream no longer has (a purge, deleted messages or a retention
// limit removed its start). It matches ErrHistoryMissing.
type HistoryGapError struct {
	// Partition is the partition that needs them, or -1 for a replay of
	// the whole stream.
	Partition int
	// From and To are the missing sequences, inclusive.
	From, To uint64
}

func (e *HistoryGapError) Error() string {
	who := "an index replayed from it"
	if e.Partition >= 0 {
		who = fmt.Sprintf("partition %d", e.Partition)
	}
	return fmt.Sprintf("%v: %s needs stream seqs %d..%d, which %s no longer has (it starts at seq %d; removed by a purge, deletes or a retention limit); "+
		"refusing to build an index without them", ErrHistoryMissing, who, e.From, e.To, StreamName, e.To+1)
}

func (e *HistoryGapError) Unwrap() error { return ErrHistoryMissing }

// historyGap reports the sequences a partition that applied up to applied
// (0: nothing, it builds from the start) needs and a stream starting at
// first lacks. The applied sequence is the last message of the partition,
// not how far the stream was read, so a removed range is a gap even when
// none of its messages were the partition's: the index cannot tell.
func historyGap(partition int, applied, first uint64) error {
	if first <= applied+1 {
		return nil
	}
	return &HistoryGapError{Partition: partition, From: applied + 1, To: first - 1}
}

// firstSeq is the first sequence the stream still holds (for an empty,
// never used stream 1).
func firstSeq(info *jetstream.StreamInfo) uint64 { return max(info.State.FirstSeq, 1) }
