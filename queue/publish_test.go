package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/queue"
)

// TestCommandMsg pins the message of a command to the contract of
// docs/protocol.md: subject, body and every header, by their public
// names.
func TestCommandMsg(t *testing.T) {
	cmd := book("cal-1", "req-1", 0, 2)
	cmd.V = actor.SchemaVersion
	if errs := cmd.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	fp := cmd.Fingerprint()
	body, err := json.Marshal(&cmd)
	if err != nil {
		t.Fatal(err)
	}
	want := nats.Header{
		"Bookline-Reply-To":    {"_INBOX.x.tok"},
		"Bookline-Schema":      {"1"},
		"Bookline-Request-Id":  {"req-1"},
		"Content-Type":         {"application/json"},
		"Nats-Msg-Id":          {"cal-1:req-1:" + fp},
		"Nats-Expected-Stream": {"BOOKLINE_CMD"},
	}
	for _, traced := range []bool{false, true} {
		ctx := context.Background()
		if traced {
			ctx = queue.WithTraceID(ctx, "http-7")
			want["Bookline-Trace-Id"] = []string{"http-7"}
		}
		msg, err := queue.CommandMsg(ctx, &cmd, fp, "_INBOX.x.tok")
		if err != nil {
			t.Fatal(err)
		}
		if msg.Subject != "bookline.cmd.cal-1" || msg.Reply != "" || !bytes.Equal(msg.Data, body) {
			t.Errorf("traced %v: subject %q reply %q body %s; want bookline.cmd.cal-1, no reply, %s", traced, msg.Subject, msg.Reply, msg.Data, body)
		}
		if !maps.EqualFunc(msg.Header, want, func(a, b []string) bool { return len(a) == 1 && len(b) == 1 && a[0] == b[0] }) {
			t.Errorf("traced %v: headers %v, want %v", traced, msg.Header, want)
		}
	}
}
