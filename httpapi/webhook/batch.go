package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Event batches: with bookline serve --event-batches the event stream
// holds, beside single events, messages of many events, one JSON line
// each (docs/protocol.md section 11). An endpoint reads the batch
// subjects of the partitions of its calendars too, keeps the lines of its
// calendars, and delivers each as it delivers the event alone: the
// webhook-id is the line's msg_id (what the event's Nats-Msg-Id would
// have been) and the data its event, byte for byte.

// batchLine is one event of a batch message.
type batchLine struct {
	Subject    string          `json:"subject"`
	MsgID      string          `json:"msg_id"`
	CommandSeq uint64          `json:"command_seq"`
	Part       int             `json:"part"`
	Event      json.RawMessage `json:"event"`
}

// id is the line's webhook-id: its msg_id, or (never written by bookline)
// what eventID makes of a single event without one.
func (b *batchLine) id() string {
	if b.MsgID != "" {
		return b.MsgID
	}
	id := "evt-" + strconv.FormatUint(b.CommandSeq, 10)
	if b.Part > 0 {
		id += "." + strconv.Itoa(b.Part)
	}
	return id
}

// splitBatch reads the lines of a batch message; bad is how many were not
// an event (none from bookline).
func splitBatch(data []byte) (lines []batchLine, bad int) {
	for line := range bytes.Lines(data) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l batchLine
		if err := json.Unmarshal(line, &l); err != nil || l.Subject == "" || len(l.Event) == 0 {
			bad++
			continue
		}
		lines = append(lines, l)
	}
	return lines, bad
}

// batchFilters are the consumer's filters for the batch subjects: those
// of its calendars' partitions, or every one.
func (l *loop) batchFilters() []string {
	cfg := &l.m.cfg
	if cfg.BatchSubjectPrefix == "" {
		return nil
	}
	if len(l.calendars) == 0 || cfg.PartitionOf == nil {
		return []string{cfg.BatchSubjectPrefix + "*"}
	}
	var parts []int
	for _, c := range l.calendars {
		parts = append(parts, cfg.PartitionOf(c))
	}
	slices.Sort(parts)
	parts = slices.Compact(parts)
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = cfg.BatchSubjectPrefix + strconv.Itoa(p)
	}
	return out
}

func (l *loop) isBatch(subject string) bool {
	return l.m.cfg.BatchSubjectPrefix != "" && strings.HasPrefix(subject, l.m.cfg.BatchSubjectPrefix)
}

// wantsSubject reports whether the endpoint's filter takes an event that
// would have had subject alone: its calendars' subjects, or any
// calendar's (not bookline.evt-invalid, as the filter <prefix>* does not).
func (l *loop) wantsSubject(subject string) bool {
	cal, ok := strings.CutPrefix(subject, l.m.cfg.SubjectPrefix)
	if !ok || cal == "" {
		return false
	}
	if len(l.calendars) == 0 {
		return !strings.ContainsAny(cal, ". ")
	}
	return slices.Contains(l.calendars, cal)
}

// handleBatch delivers the endpoint's events of a batch message in order,
// each as handle delivers an event alone, under one lease, and acks the
// message once all are. When one is not delivered the message goes back
// (or is given up) as a single event would; this loop remembers how far
// it got, and skips those when the batch comes back to it. Another
// instance that gets the batch sends them again: at least once, under
// the same webhook-ids, as a redelivered single event.
func (l *loop) handleBatch(ctx context.Context, cons jetstream.Consumer, msg jetstream.Msg, meta *jetstream.MsgMetadata, pulled time.Time) {
	lines, bad := splitBatch(msg.Data())
	if bad > 0 {
		l.m.log.Error("webhook: skipping undecodable lines of an event batch", "endpoint", l.id, "stream_seq", meta.Sequence.Stream, "lines", bad)
	}
	start := 0
	if l.batchSeq == meta.Sequence.Stream {
		start = min(l.batchDone, len(lines))
	}
	ls := newLease(l.m.cfg.JS.Conn(), msg.Reply(), pulled, consumerAckWait(cons))
	defer ls.stop()
	for i := start; i < len(lines); i++ {
		ev := &lines[i]
		if !l.wantsSubject(ev.Subject) {
			continue
		}
		typ := EventType(ev.Event)
		if !wants(l.ep.Load(), typ) {
			continue
		}
		if !l.deliver(ctx, cons, msg, meta, ls, ev.id(), typ, deliveryBody(typ, meta, ev.Event)) {
			l.batchSeq, l.batchDone = meta.Sequence.Stream, i
			return
		}
	}
	l.batchSeq, l.batchDone = 0, 0
	l.ack(ctx, msg)
}
