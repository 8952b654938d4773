package queue_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestClusterTakeoverSendsPendingEventBatches: with event batches on,
// each instance publishes the batches of the partitions it owns only;
// the events an owner decided but could not publish before it died are
// held by the others and published in batches by the one that takes the
// partition over, so that a consumer deduping by msg_id sees every
// command's event once, in command order.
func TestClusterTakeoverSendsPendingEventBatches(t *testing.T) {
	t.Parallel()
	const parts = 4
	ttl := 2 * time.Second
	c := queuetest.StartCluster(t, 3)
	urls := c.URLs()
	nodes := []*queue.Node{clusterNodeWith(t, urls, "b0", parts, ttl, nil, true), clusterNodeWith(t, urls, "b1", parts, ttl, nil, true),
		clusterNodeWith(t, urls, "b2", parts, ttl, nil, true)}
	var cals []string
	for p := range parts {
		cals = append(cals, calendarOn(p, parts, "eb"))
	}
	for _, cal := range cals {
		submit(t, nodes[0], upsert(cal))
	}
	m := waitSpread(t, parts, cals, nodes...)
	p := queue.PartitionOf(cals[0], parts)
	var owner *queue.Node
	var rest []*queue.Node
	for _, n := range nodes {
		if n.InstanceID() == m[p] {
			owner = n
		} else {
			rest = append(rest, n)
		}
	}
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// eventSeqs waits until every calendar of cals has want events (by
	// msg_id) and returns the command seqs of cal's, in stream order.
	eventSeqs := func(cal string, want int) []uint64 {
		var seqs []uint64
		queuetest.CheckFor(t, 30*time.Second, func() error {
			evs, _, err := tryReadEventStream(t, js)
			if err != nil {
				return err
			}
			seen := map[string]bool{}
			seqs = seqs[:0]
			for _, ev := range evs {
				if ev.Batch == "" && ev.Subject != queue.EventSubjectInvalid {
					return fmt.Errorf("event %s published alone", ev.MsgID)
				}
				if ev.Subject != queue.EventSubject(cal) || seen[ev.MsgID] {
					continue
				}
				seen[ev.MsgID] = true
				seqs = append(seqs, ev.CommandSeq)
			}
			if len(seqs) != want {
				return fmt.Errorf("%d events of %s, want %d", len(seqs), cal, want)
			}
			return nil
		})
		if !slices.IsSorted(seqs) {
			t.Fatalf("events of %s out of command order: %v", cal, seqs)
		}
		return seqs
	}
	cal := cals[0]
	eventSeqs(cal, 2) // the upsert and the spread's booking
	queue.PauseEvents(owner, true)
	const k = 12
	for i := range k {
		submit(t, owner, book(cal, fmt.Sprintf("pend-%d", i), 4+i%5, 2))
	}
	killNode(owner)
	eventSeqs(cal, 2+k)
	for _, other := range cals[1:] {
		eventSeqs(other, 2)
	}
	for _, n := range rest {
		queuetest.CheckFor(t, 20*time.Second, func() error { return noPendingEvents(n) })
	}
}
