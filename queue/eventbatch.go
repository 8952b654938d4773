package queue

import (
	"bytes"
	"hash"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Event batches (--event-batches): the events of one drain whose partition
// is known go to EventBatchSubject(partition) as a few messages, one line
// per event, instead of one message each. During a bulk import the event
// stream otherwise stores as many messages as the command stream, and the
// server keeps a dedupe id per message for EventDuplicateWindow and the
// state of every calendar's subject: most of its heap after a large
// import. A line is the envelope docs/protocol.md section 11 describes:
//
//	{"subject":"bookline.evt.<cal>","msg_id":"evt-<created>-<seq>[.<part>]",
//	 "command_stream":"BOOKLINE_CMD@…","command_seq":<seq>[,"part":<n>],"event":<reply>}
//
// written by hand: the event publisher runs once per decided command.

// maxEventBatchBytes bounds a batch message (less when the server's
// max_payload is smaller): one drain (eventBatch events of a few hundred
// bytes each) fits in about one message per partition.
const maxEventBatchBytes = 1 << 20

// eventBatchHeaderRoom is left below max_payload for a batch message's
// headers, which count against it too (about 250 bytes).
const eventBatchHeaderRoom = 1 << 10

// eventBatchBytes is maxEventBatchBytes, smaller in tests.
var eventBatchBytes = maxEventBatchBytes

// ndjsonHeader is the Content-Type of a batch message.
var ndjsonHeader = []string{"application/x-ndjson"}

// eventBatcher gathers one drain's events into batch messages.
type eventBatcher struct {
	identity string
	// created is the "<created>-" of the events' ids (EventMsgID).
	created string
	limit   int
	open    []*batchMsg // by partition; nil while it has no event
	full    []*batchMsg // closed, in the order they filled
	scratch []byte
	ends    []int
}

// batchMsg is one batch message being filled.
type batchMsg struct {
	part        int
	buf         []byte
	n           int
	first, last string      // ids without the "evt-<created>-"
	hash        hash.Hash64 // FNV-1a over the events' ids (msgID)
	of          []int       // the entries it carries, in order, once each
}

// batchesRefusedFor is how long the publisher sends single events after
// the event stream refused a batch subject: an instance of an older build,
// started later, set the stream's subjects back to those it knows. The
// events are then delayed by one retry instead of until a restart of this
// build puts the subject back.
const batchesRefusedFor = time.Minute

// batching reports whether this drain may publish batches.
func (e *eventPublisher) batching() bool {
	return e.batches && time.Now().After(e.batchesRefused)
}

// refuseBatches notes that no stream took a batch subject.
func (e *eventPublisher) refuseBatches() {
	if !e.batching() {
		return
	}
	e.batchesRefused = time.Now().Add(batchesRefusedFor)
	e.log.Warn("no stream takes the event batch subjects (an instance of an older build reset BOOKLINE_EVT's subjects?): publishing single events for a while",
		"subject", EventBatchSubjectPrefix+"*", "for", batchesRefusedFor)
}

// batcher starts the batches of a drain of the command stream incarnation
// identity.
func (e *eventPublisher) batcher(identity string) *eventBatcher {
	if identity != e.msgIDIdentity {
		e.msgIDIdentity, e.msgIDPrefix = identity, eventMsgIDPrefix(identity)
	}
	limit := eventBatchBytes
	if mp := e.js.Conn().MaxPayload(); mp > 0 {
		limit = min(limit, int(mp)-eventBatchHeaderRoom)
	}
	return &eventBatcher{identity: identity, created: strings.TrimPrefix(e.msgIDPrefix, "evt-"), limit: limit,
		open: make([]*batchMsg, e.partitions)}
}

// add puts the events of outbox entry i, ev, in its partition's batch, and
// reports whether it did. It does not when the partition is unknown, the
// entry is undecodable, or an event could never fit a batch (a line over
// the limit, or a line break in the reply, which a reply encoded by this
// build never has): the caller publishes the entry as single events.
func (b *eventBatcher) add(ev data.Event, i int) bool {
	p := eventPartition(ev, len(b.open))
	if p < 0 {
		return false
	}
	parts, err := actor.EventParts(ev.Payload)
	if err != nil {
		return false // eventMsgs logs and drops it
	}
	seq := strconv.FormatUint(ev.Seq, 10)
	b.scratch, b.ends = b.scratch[:0], b.ends[:0]
	for k, part := range parts {
		if bytes.IndexByte(part.JSON, '\n') >= 0 {
			return false
		}
		cal, n := ev.Calendar, 0
		if part.Calendar != "" {
			cal, n = part.Calendar, k+1
		}
		b.scratch = appendEventLine(b.scratch, EventSubject(cal), b.created, seq, b.identity, ev.Seq, n, part.JSON)
		if len(b.scratch)-b.lineStart() > b.limit {
			return false
		}
		b.ends = append(b.ends, len(b.scratch))
	}
	from := 0
	for k, end := range b.ends {
		id := seq
		if parts[k].Calendar != "" {
			id += "." + strconv.Itoa(k+1)
		}
		b.put(p, i, id, b.scratch[from:end])
		from = end
	}
	return true
}

// lineStart is where the line being written to scratch starts.
func (b *eventBatcher) lineStart() int {
	if len(b.ends) == 0 {
		return 0
	}
	return b.ends[len(b.ends)-1]
}

// put appends line, the event id (without its "evt-<created>-") of entry
// i, to partition p's batch, closing the batch first if it would grow
// past the limit.
func (b *eventBatcher) put(p, i int, id string, line []byte) {
	bt := b.open[p]
	if bt != nil && len(bt.buf)+len(line) > b.limit {
		b.full, bt = append(b.full, bt), nil
	}
	if bt == nil {
		bt = &batchMsg{part: p, buf: make([]byte, 0, min(b.limit, 64<<10)), first: id, hash: fnv.New64a()}
		b.open[p] = bt
	}
	bt.buf = append(bt.buf, line...)
	bt.n++
	bt.last = id
	bt.hash.Write([]byte(id + "\n"))
	if len(bt.of) == 0 || bt.of[len(bt.of)-1] != i {
		bt.of = append(bt.of, i)
	}
}

// finish appends the batch messages to msgs (see outboxMsgs for of and
// ends).
func (b *eventBatcher) finish(msgs []*nats.Msg, of, ends []int) ([]*nats.Msg, []int, []int) {
	for _, bt := range b.open {
		if bt != nil {
			b.full = append(b.full, bt)
		}
	}
	stream := []string{b.identity}
	for _, bt := range b.full {
		m := &nats.Msg{Subject: EventBatchSubject(bt.part), Data: bt.buf, Header: make(nats.Header, 6)}
		m.Header[jetstream.MsgIDHeader] = []string{b.msgID(bt)}
		m.Header[HeaderEventCount] = []string{strconv.Itoa(bt.n)}
		m.Header[HeaderCommandStream] = stream
		m.Header[HeaderSchema] = schemaHeader
		m.Header[HeaderContentType] = ndjsonHeader
		m.Header[jetstream.ExpectedStreamHeader] = eventStreamHeader
		msgs, of = append(msgs, m), append(of, bt.of...)
		ends = append(ends, len(of))
	}
	return msgs, of, ends
}

// msgID is a batch's Nats-Msg-Id: evtb-<created>-<first>-<last>-<hash>,
// first and last the ids of its first and last events without their
// "evt-<created>-", hash 16 hex digits of FNV-1a (64 bit) over those ids
// of all its events, each followed by "\n". The same events give the
// same id, so the event stream drops a batch re-sent as it was; the hash keeps two different sets
// with the same ends apart (a dropped batch would be events lost).
func (b *eventBatcher) msgID(bt *batchMsg) string {
	h := strconv.FormatUint(bt.hash.Sum64(), 16)
	return "evtb-" + b.created + bt.first + "-" + bt.last + "-" + strings.Repeat("0", 16-len(h)) + h
}

// appendEventLine appends one envelope line of a batch: the event JSON
// event of command seq (decimal seqText) of stream identity, that would
// have been published on subject with id "evt-"+created+seqText (and
// "."+part when part > 0).
func appendEventLine(dst []byte, subject, created, seqText, identity string, seq uint64, part int, event []byte) []byte {
	dst = append(dst, `{"subject":`...)
	dst = actor.AppendJSONString(dst, subject)
	// created is "<decimal nanoseconds>-" (EventMsgID): nothing to escape.
	dst = append(dst, `,"msg_id":"evt-`...)
	dst = append(dst, created...)
	dst = append(dst, seqText...)
	if part > 0 {
		dst = append(dst, '.')
		dst = strconv.AppendInt(dst, int64(part), 10)
	}
	dst = append(dst, `","command_stream":`...)
	dst = actor.AppendJSONString(dst, identity)
	dst = append(dst, `,"command_seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	if part > 0 {
		dst = append(dst, `,"part":`...)
		dst = strconv.AppendInt(dst, int64(part), 10)
	}
	dst = append(dst, `,"event":`...)
	dst = append(dst, event...)
	return append(dst, "}\n"...)
}
