package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/httpapi/webhook"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestEventBatchesFlag: --event-batches (BOOKLINE_EVENT_BATCHES) is off
// by default and reaches the node's configuration.
func TestEventBatchesFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want bool
	}{
		{nil, "", false},
		{[]string{"--event-batches"}, "", true},
		{nil, "true", true},
		{[]string{"--event-batches=false"}, "true", false},
	} {
		if c.env != "" {
			t.Setenv("BOOKLINE_EVENT_BATCHES", c.env)
		}
		var sc serveConfig
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		sc.defineFlags(fs)
		if err := parseFlagsWithConfig(fs, c.args, "config"); err != nil {
			t.Fatalf("%v with BOOKLINE_EVENT_BATCHES=%q: %v", c.args, c.env, err)
		}
		if got := sc.nodeConfig(nodeSetup{}).EventBatches; got != c.want {
			t.Errorf("%v with BOOKLINE_EVENT_BATCHES=%q: EventBatches %v, want %v", c.args, c.env, got, c.want)
		}
	}
}

// TestServeEventBatches: bookline serve --event-batches publishes the
// outcome events as batches, and its webhooks deliver them, each under
// the id its line names.
func TestServeEventBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	var mu sync.Mutex
	var ids []string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ids = append(ids, r.Header.Get(webhook.HeaderID))
		mu.Unlock()
	}))
	defer rcv.Close()
	dir := t.TempDir()
	p := startProc(t, "serve", "--event-batches", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--partitions", "2", "--webhook-allow-hosts", "127.0.0.1")
	if st, b := httpDo(t, "POST", p.URL+"/v1/webhooks", "", fmt.Sprintf(`{"url":%q}`, rcv.URL)); st != 201 {
		t.Fatalf("create webhook: %d %s", st, b)
	}
	if st, b := httpDo(t, "PUT", p.URL+"/v1/calendars/eb", "", `{"timezone":"UTC"}`); st != 201 {
		t.Fatalf("calendar: %d %s", st, b)
	}
	if st, b := httpDo(t, "POST", p.URL+"/v1/calendars/eb/bookings", "", `{"start":"2027-01-01T10:00:00Z","end":"2027-01-01T11:00:00Z","customer":"x"}`); st != 201 {
		t.Fatalf("booking: %d %s", st, b)
	}
	m := regexp.MustCompile(`msg="embedded nats listening" url=(\S+)`).FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("no nats url in the log:\n%s", p.output())
	}
	nc, err := nats.Connect(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The stream holds the two events in batches, none alone.
	var lines []string
	queuetest.CheckFor(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, queue.EventStreamName)
		if err != nil {
			return err
		}
		lines = lines[:0]
		for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
			msg, err := s.GetMsg(ctx, seq)
			if err != nil {
				return err
			}
			if !strings.HasPrefix(msg.Subject, queue.EventBatchSubjectPrefix) {
				return fmt.Errorf("an event alone on %s", msg.Subject)
			}
			for _, l := range strings.Split(strings.TrimSuffix(string(msg.Data), "\n"), "\n") {
				var line struct {
					MsgID string `json:"msg_id"`
				}
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					return err
				}
				lines = append(lines, line.MsgID)
			}
		}
		if len(lines) != 2 {
			return fmt.Errorf("%d events in batches, want 2", len(lines))
		}
		return nil
	})
	queuetest.CheckFor(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(ids, lines) {
			return fmt.Errorf("webhook ids %v, want %v", ids, lines)
		}
		return nil
	})
}
