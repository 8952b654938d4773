package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestSkipSubcommand: a command of a schema version this build does not
// know stops its partition; bookline skip --seq finds the partition
// stopped there and skips the command; the partition decides again, and
// bookline verify finds the live index equal to a replay of the stream.
func TestSkipSubcommand(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	p := startProc(t, "serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--partitions", "4")
	m := natsURLRe.FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("no nats url in logs:\n%s", p.output())
	}
	natsURL := m[1]
	req, _ := http.NewRequest("PUT", p.URL+"/v1/calendars/alice", strings.NewReader(`{"timezone":"UTC"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A command of schema version 9, as a newer build would publish it.
	msg := nats.NewMsg(queue.CommandSubject("alice"))
	msg.Header.Set(queue.HeaderSchema, "3")
	msg.Data = []byte(`{"v":9,"type":"booking.create","request_id":"n3","calendar_id":"alice","booking":{"start":"2027-02-01T08:00:00Z","end":"2027-02-01T09:00:00Z","customer":"Ada"}}`)
	reply, err := nc.RequestMsg(msg, 5*time.Second) // the stream's PubAck
	if err != nil {
		t.Fatal(err)
	}
	var ack struct {
		Seq uint64 `json:"seq"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil || ack.Seq == 0 {
		t.Fatalf("publish: %s %v", reply.Data, err)
	}
	ready := func(want int) error {
		resp, err := http.Get(p.URL + "/readyz")
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			return fmt.Errorf("readyz %d %s", resp.StatusCode, b)
		}
		return nil
	}
	queuetest.CheckFor(t, 20*time.Second, func() error { return ready(http.StatusServiceUnavailable) })

	if code, out, errs := runMain("skip", "--url", p.URL, "--seq", fmt.Sprint(ack.Seq+1)); code == 0 ||
		!strings.Contains(errs, fmt.Sprintf("no partition is stopped at stream seq %d", ack.Seq+1)) {
		t.Fatalf("skip of another seq: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := runMain("skip", "--url", p.URL, "--seq", fmt.Sprint(ack.Seq))
	if code != 0 || !strings.Contains(out, fmt.Sprintf("stream seq %d skipped", ack.Seq)) {
		t.Fatalf("skip: exit %d\n%s\n%s", code, out, errs)
	}
	queuetest.CheckFor(t, 20*time.Second, func() error { return ready(http.StatusOK) })
	if !strings.Contains(p.output(), "COMMAND SKIPPED BY AN OPERATOR") {
		t.Fatalf("no audit line in the logs:\n%s", p.output())
	}
	// The partition decides again: the slot the skipped command asked
	// for is free.
	if code, body, err := post(p.URL+"/v1/calendars/alice/bookings", `{"start":"2027-02-01T08:00:00Z","end":"2027-02-01T09:00:00Z","customer":"Bob"}`); err != nil || code != http.StatusCreated {
		t.Fatalf("booking after the skip: %d %s %v", code, body, err)
	}
	if code, out, errs := runMain("verify", "--url", p.URL, "--nats-url", natsURL); code != 0 || !strings.Contains(out, "ok: live index equals a replay") {
		t.Fatalf("verify after a skip: exit %d\n%s\n%s", code, out, errs)
	}
}
