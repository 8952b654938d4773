//go:build !race

// Not under the race detector: nats-server v2.15.2's EnableJetStream
// writes the API's export subscriptions (setJetStreamExportSubs) that
// its API dispatch of earlier requests read unsynchronised, and a few
// reloads in a row report that race in 1 of 8 runs under load. The
// process tests on a full disk (cmd/bookline) reload the store under
// -race in a child process, where a report does not fail the test.
// Run it with `go test -run WritersPullAgain ./queue`.

package queue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// After the embedded JetStream is reloaded (a full disk that has room
// again), every partition decides new commands at once: a writer whose
// first pull met JetStream still starting ("no responders") pulled again
// only after nats.go's missed heartbeats, 30 s later, and its commands
// waited that long.
func TestWritersPullAgainAfterJetStreamReload(t *testing.T) {
	logs := &queuetest.SyncBuffer{}
	n := startNodeWith(t, queue.NodeConfig{DataDir: t.TempDir(), Partitions: 2}, logs)
	defer stopNode(t, n)
	cals := []string{"r-a", "r-b", "r-c", "r-d"}
	for _, c := range cals {
		submit(t, n, upsert(c))
	}
	defer func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	}()
	for round := range 12 {
		if err := queue.ReloadJetStream(n); err != nil {
			t.Fatal(err)
		}
		// The writers start over after a reload: ready once they have
		// caught up again.
		queuetest.CheckFor(t, 10*time.Second, n.Ready)
		for i, c := range cals {
			if r := submit(t, n, book(c, fmt.Sprintf("r%d-%d", round, i), round, 1)); r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("round %d, %s: %+v", round, c, r)
			}
		}
	}
}
