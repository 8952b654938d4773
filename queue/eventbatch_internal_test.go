package queue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// batchLine is an envelope line as a consumer decodes it with encoding/json.
type batchLine struct {
	Subject       string          `json:"subject"`
	MsgID         string          `json:"msg_id"`
	CommandStream string          `json:"command_stream"`
	CommandSeq    uint64          `json:"command_seq"`
	Part          int             `json:"part"`
	Event         json.RawMessage `json:"event"`
}

func decodeLines(t *testing.T, b []byte) []batchLine {
	t.Helper()
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("batch does not end with a line break: %q", b)
	}
	var out []batchLine
	for _, line := range bytes.Split(b[:len(b)-1], []byte("\n")) {
		d := json.NewDecoder(bytes.NewReader(line))
		d.DisallowUnknownFields()
		var l batchLine
		if err := d.Decode(&l); err != nil {
			t.Fatalf("line %s: %v", line, err)
		}
		if d.More() {
			t.Fatalf("line %s: more than one value", line)
		}
		out = append(out, l)
	}
	return out
}

func TestEventLineIsJSON(t *testing.T) {
	event := []byte(`{"v":1,"type":"booking.create","outcome":"accepted","seq":7}`)
	for _, c := range []struct {
		subject, identity string
		part              int
	}{
		{"bookline.evt.alice", "BOOKLINE_CMD@2026-01-02T03:04:05.123456789Z", 0},
		{"bookline.evt.bob", "BOOKLINE_CMD@2026-01-02T03:04:05Z", 3},
		// Not what bookline writes, but escaped all the same.
		{"bookline.evt-invalid", "odd \"quoted\" \\ \x01 identity", 1},
	} {
		line := appendEventLine(nil, c.subject, "1767323045123456789-", "42", c.identity, 42, c.part, event)
		got := decodeLines(t, line)
		if len(got) != 1 {
			t.Fatalf("%d lines", len(got))
		}
		l := got[0]
		wantID := "evt-1767323045123456789-42"
		if c.part > 0 {
			wantID += fmt.Sprintf(".%d", c.part)
		}
		if l.Subject != c.subject || l.MsgID != wantID || l.CommandStream != c.identity || l.CommandSeq != 42 ||
			l.Part != c.part || !bytes.Equal(l.Event, event) {
			t.Errorf("line %s decodes to %+v", line, l)
		}
		if c.part == 0 && bytes.Contains(line, []byte(`"part"`)) {
			t.Errorf("line %s names a part", line)
		}
	}
}

// TestEventBatcherSplitsAndNames: a drain's events go to their
// partition's batch in order, a batch closes before it would pass the
// limit, an entry of several parts keeps them (numbered from 1), and the
// ids depend on the set of events only.
func TestEventBatcherSplitsAndNames(t *testing.T) {
	const parts = 4
	identity := "BOOKLINE_CMD@2026-01-02T03:04:05Z"
	reply := func(cal string, seq uint64) actor.Reply {
		return actor.Reply{V: actor.SchemaVersion, RequestID: fmt.Sprint("r", seq), CalendarID: cal, Type: actor.TypeCalendarUpsert,
			Outcome: actor.OutcomeAccepted, Seq: seq}
	}
	var evs []data.Event
	for seq := uint64(1); seq <= 40; seq++ {
		cal := fmt.Sprint("cal", seq%7)
		r := reply(cal, seq)
		evs = append(evs, data.Event{Seq: seq, Calendar: cal, Payload: actor.AppendReply(nil, &r)})
	}
	// An entry of two parts (a collective.commits), and one of no
	// partition known.
	list := []byte{0xe5}
	list = data.AppendUvarint(list, 2)
	for _, cal := range []string{"cal1", "cal2"} {
		r := reply(cal, 41)
		list = data.AppendString(list, cal)
		list = data.AppendBytes(list, actor.AppendReply(nil, &r))
	}
	evs = append(evs, data.Event{Seq: 41, Calendar: "_bookline-commits-0", Payload: list})
	evs = append(evs, data.Event{Seq: 42, Payload: evs[0].Payload})

	run := func(evs []data.Event, limit int) ([]*batchMsg, []int) {
		b := &eventBatcher{identity: identity, created: "1767323045000000000-", limit: limit, open: make([]*batchMsg, parts)}
		var single []int
		for i, ev := range evs {
			if !b.add(ev, i) {
				single = append(single, i)
			}
		}
		msgs, of, ends := b.finish(nil, nil, nil)
		if len(ends) != len(msgs) || len(msgs) == 0 || ends[len(ends)-1] != len(of) {
			t.Fatalf("%d messages, ends %v, %d entries", len(msgs), ends, len(of))
		}
		for _, m := range msgs {
			if len(m.Data) > limit {
				t.Errorf("a batch of %d bytes, limit %d", len(m.Data), limit)
			}
			if m.Header.Get(HeaderContentType) != "application/x-ndjson" || m.Header.Get(HeaderCommandStream) != identity ||
				m.Header.Get(jetstream.ExpectedStreamHeader) != EventStreamName {
				t.Errorf("headers %v", m.Header)
			}
		}
		return b.full, single
	}
	batches, single := run(evs, 1<<20)
	if len(single) != 1 || single[0] != 41 {
		t.Fatalf("entries left single: %v, want only the one without a calendar", single)
	}
	seen := map[string]bool{}
	for _, bt := range batches {
		lines := decodeLines(t, bt.buf)
		if len(lines) != bt.n {
			t.Fatalf("%d lines, count %d", len(lines), bt.n)
		}
		var last uint64
		for _, l := range lines {
			cal := strings.TrimPrefix(l.Subject, EventSubjectPrefix)
			if PartitionOf(cal, parts) != bt.part && l.CommandSeq != 41 {
				t.Errorf("%s in the batch of partition %d", l.Subject, bt.part)
			}
			if l.CommandSeq < last {
				t.Errorf("seq %d after %d", l.CommandSeq, last)
			}
			last = l.CommandSeq
			seen[l.MsgID] = true
			if l.CommandSeq == 41 && (l.Part < 1 || !strings.HasSuffix(l.MsgID, fmt.Sprintf("-41.%d", l.Part))) {
				t.Errorf("part line %+v", l)
			}
		}
	}
	if len(seen) != 42 {
		t.Fatalf("%d distinct events in the batches, want 42", len(seen))
	}
	// Split: a small limit makes more messages with the same lines.
	small, _ := run(evs, 600)
	if len(small) <= len(batches) {
		t.Fatalf("limit 600: %d batches, as many as unlimited (%d)", len(small), len(batches))
	}
	n := 0
	for _, bt := range small {
		n += bt.n
	}
	if n != 42 {
		t.Fatalf("split batches carry %d events", n)
	}
	// Same set, same id; another set with the same ends, another id.
	b1 := &eventBatcher{identity: identity, created: "9-", limit: 1 << 20, open: make([]*batchMsg, 1)}
	b2 := &eventBatcher{identity: identity, created: "9-", limit: 1 << 20, open: make([]*batchMsg, 1)}
	b3 := &eventBatcher{identity: identity, created: "9-", limit: 1 << 20, open: make([]*batchMsg, 1)}
	for i, ev := range evs[:10] {
		b1.add(ev, i)
		b2.add(ev, i)
		if i != 4 {
			b3.add(ev, i)
		}
	}
	id1, id2, id3 := b1.msgID(b1.open[0]), b2.msgID(b2.open[0]), b3.msgID(b3.open[0])
	if id1 != id2 || id1 == id3 || !strings.HasPrefix(id1, "evtb-9-1-10-") || !strings.HasPrefix(id3, "evtb-9-1-10-") {
		t.Fatalf("ids %s %s %s", id1, id2, id3)
	}
	// The example of docs/protocol.md section 11.
	doc := &eventBatcher{identity: "BOOKLINE_CMD@2026-11-29T08:59:58.5Z", created: "1795942798500000000-", limit: 1 << 20,
		open: make([]*batchMsg, 2)}
	for _, seq := range []uint64{4, 5} {
		r := reply("alice", seq)
		if !doc.add(data.Event{Seq: seq, Calendar: "alice", Payload: actor.AppendReply(nil, &r)}, int(seq)) {
			t.Fatal("not batched")
		}
	}
	if bt := doc.open[1]; bt == nil || doc.msgID(bt) != "evtb-1795942798500000000-4-5-015cafd8fee5b690" {
		t.Fatalf("the documented example: %+v", doc.open)
	}
}
