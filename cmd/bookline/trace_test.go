package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/queue"
)

// serve wires the API's trace port (httpapi.Config.WithTraceID): a
// write's X-Request-Id travels with its command in the stream.
func TestServeSendsTraceID(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	p := startProc(t, "serve", "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--partitions", "2")
	req, _ := http.NewRequest("PUT", p.URL+"/v1/calendars/tr", strings.NewReader(`{"timezone":"UTC"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("create calendar: %v %v", err, resp)
	}
	resp.Body.Close()
	req, _ = http.NewRequest("POST", p.URL+"/v1/calendars/tr/bookings",
		strings.NewReader(`{"start":"2027-01-04T10:00:00Z","end":"2027-01-04T11:00:00Z","customer":"t"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "trace-serve.1")
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != 201 {
		t.Fatalf("book: %v %v", err, resp)
	}
	resp.Body.Close()

	nc, err := nats.Connect(natsURLOf(t, p.output()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, fmt.Sprintf("%s%d.tr", queue.PartitionSubjectPrefix, queue.PartitionOf("tr", 2)))
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(queue.HeaderTraceID); got != "trace-serve.1" {
		t.Fatalf("%s = %q in the stream, want the request's X-Request-Id", queue.HeaderTraceID, got)
	}
}
