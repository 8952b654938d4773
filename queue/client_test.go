package queue

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestPubAck: the acknowledgement forms JetStream sends (as nats-server
// v2.15 writes them) are read right, the common one without decoding.
func TestPubAck(t *testing.T) {
	status := nats.Header{}
	status.Set("Status", "503")
	for _, c := range []struct {
		name    string
		m       *nats.Msg
		dup     bool
		wantErr string
	}{
		{"stored", &nats.Msg{Data: []byte(`{"stream":"` + StreamName + `","seq":42}`)}, false, ""},
		{"stored with domain", &nats.Msg{Data: []byte(`{"stream":"` + StreamName + `","domain":"hub","seq":42}`)}, false, ""},
		{"duplicate", &nats.Msg{Data: []byte(`{"stream":"` + StreamName + `","seq":42,"duplicate": true}`)}, true, ""},
		{"refused", &nats.Msg{Data: []byte(`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"` + StreamName + `","seq":0}`)}, false, "maximum messages exceeded"},
		{"other stream", &nats.Msg{Data: []byte(`{"stream":"OTHER","seq":1}`)}, false, `stream "OTHER"`},
		{"no responders", &nats.Msg{Header: status}, false, "status 503"},
		{"garbage", &nats.Msg{Data: []byte(`{"stream":`)}, false, "publish acknowledgement"},
	} {
		dup, err := pubAck(c.m)
		if dup != c.dup || (err == nil) != (c.wantErr == "") || err != nil && !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: duplicate %v, err %v; want %v, %q", c.name, dup, err, c.dup, c.wantErr)
		}
	}
}

// TestDeliverLocalOnlyTakesItsOwnReplies: a reply subject of another inbox
// (an importer, another instance) or an acknowledgement subject is left to
// NATS; a reply to this client's inbox reaches its waiter.
func TestDeliverLocalOnlyTakesItsOwnReplies(t *testing.T) {
	c := &Client{prefix: "_INBOX.bookline.abc", waiters: map[string]*waiter{}}
	w := &waiter{ack: make(chan *nats.Msg, 1), reply: make(chan []byte, 1)}
	c.waiters["tok"] = w
	for _, subj := range []string{"_INBOX.importer.tok", "_INBOX.bookline.abcd.tok", "_INBOX.bookline.abc.a.tok", "_INBOX.bookline.abc", "_INBOX.bookline.ab"} {
		if c.DeliverLocal(subj, []byte("x")) {
			t.Errorf("DeliverLocal(%q) took a reply that is not its own", subj)
		}
	}
	if !c.DeliverLocal("_INBOX.bookline.abc.tok", []byte("answer")) {
		t.Fatal("DeliverLocal refused a reply to its own inbox")
	}
	select {
	case got := <-w.reply:
		if string(got) != "answer" {
			t.Errorf("waiter got %q", got)
		}
	default:
		t.Fatal("the waiter got nothing")
	}
	if _, still := c.waiters["tok"]; still {
		t.Error("the waiter is still registered after its answer")
	}
	// A token nobody waits for any more (the request timed out) is taken
	// and dropped: publishing it would reach nobody either.
	if !c.DeliverLocal("_INBOX.bookline.abc.gone", []byte("late")) {
		t.Error("DeliverLocal refused a late reply to its own inbox")
	}
}
