package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestClusterStartTogether starts four instances at the same moment on a
// fresh 3-node cluster whose servers sync before they acknowledge, with
// the default replicas (min(3, servers) = 3). Every instance must start
// and become ready: the streams, the buckets, the snapshot store and the
// partition consumers are created by whichever request the cluster
// answers first and found by the others, and requests the cluster drops
// while its meta leader settles are retried. (Before, one or more exited
// with "queue: command stream: context deadline exceeded".) The webhook
// bucket, which cmd/bookline creates through Node.EnsureKeyValue right
// after the start, is created at once by all four too. Run it with
// -count to see it hold.
func TestClusterStartTogether(t *testing.T) {
	t.Parallel()
	// NoWait: the instances start as soon as the servers take
	// connections, before JetStream's meta leader is elected.
	c := queuetest.StartClusterWith(t, 3, queuetest.ClusterOptions{SyncAlways: true, NoWait: true})
	const instances = 4
	var (
		release = make(chan struct{})
		wg      sync.WaitGroup
		nodes   = make([]*queue.Node, instances)
		errs    = make([]error, instances)
		logs    = make([]*queuetest.SyncBuffer, instances)
	)
	for i := range instances {
		logs[i] = &queuetest.SyncBuffer{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			n, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), NATSURL: c.URLs(), InstanceID: fmt.Sprintf("t%d", i),
				Servers: queue.ServerCheck{MonitorURLs: c.MonitorURLs()}, Logger: slogTo(logs[i])})
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				_, err = n.EnsureKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "BOOKLINE_WEBHOOKS", History: 1})
				cancel()
			}
			nodes[i], errs[i] = n, err
		}()
	}
	began := time.Now()
	close(release)
	wg.Wait()
	for i, n := range nodes {
		if n != nil {
			t.Cleanup(func() { stopNode(t, n) })
		}
		if errs[i] != nil {
			t.Errorf("instance t%d did not start: %v\n%s", i, errs[i], logs[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	started := time.Since(began)
	for _, n := range nodes {
		queuetest.CheckFor(t, 2*time.Minute, n.Ready)
	}
	t.Logf("%d instances started together: all started after %s, all ready after %s",
		instances, started.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	ctx := context.Background()
	for _, name := range []string{queue.StreamName, queue.EventStreamName, "KV_" + queue.MembersBucket, "KV_" + queue.ProgressBucket,
		"KV_BOOKLINE_WEBHOOKS", "OBJ_" + queue.SnapshotBucket} {
		s, err := nodes[0].JetStream().Stream(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("%s has %d replicas, want 3 (min(3, servers))", name, r)
		}
	}
}
