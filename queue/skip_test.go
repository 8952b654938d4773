package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// rulesLevels reads every partition's rules level from n's index.
func rulesLevels(t *testing.T, n *queue.Node) []int {
	t.Helper()
	out := make([]int, len(n.Parts()))
	if err := n.Store().View(func(tx *data.Tx) error {
		for p := range out {
			out[p] = tx.RulesLevel(p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitLevel2 waits until every partition of n decided its schema version
// 2 marker.
func waitLevel2(t *testing.T, n *queue.Node) {
	t.Helper()
	queuetest.CheckFor(t, 20*time.Second, func() error {
		for p, l := range rulesLevels(t, n) {
			if l != 2 {
				return fmt.Errorf("partition %d at rules level %d", p, l)
			}
		}
		return nil
	})
}

// TestEmbeddedStartRaisesRulesLevel: the only instance publishes the
// schema version 2 marker to each partition's system token at start (the
// first sequences of a new stream), each partition decides it and from
// then on decides with the strict rules; a restart publishes none again.
func TestEmbeddedStartRaisesRulesLevel(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir, nil)
	waitLevel2(t, n)
	info, err := n.JetStream().Stream(context.Background(), queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(len(n.Parts())) {
		t.Fatalf("%d messages after start, want one marker per partition (%d)", got, len(n.Parts()))
	}
	for p := range n.Parts() {
		tok := queue.SystemToken(p, len(n.Parts()))
		if !strings.HasPrefix(tok, queue.SystemTokenPrefix) || queue.PartitionOf(tok, len(n.Parts())) != p {
			t.Fatalf("partition %d: system token %q", p, tok)
		}
	}
	// The strict rules now: a blank customer published straight to NATS
	// is refused, not booked.
	const cal = "strict"
	submit(t, n, upsert(cal))
	inbox := nats.NewInbox()
	sub, err := n.Conn().SubscribeSync(inbox + ".*")
	if err != nil {
		t.Fatal(err)
	}
	blank := book(cal, "blank", 0, 4)
	blank.Booking.Customer = "  "
	blank.V = actor.SchemaVersion
	body, _ := json.Marshal(blank)
	publishRaw(t, n.JetStream(), cal, body, actor.SchemaVersion, inbox+".blank")
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r actor.Reply
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Code != actor.CodeInvalidRequest {
		t.Fatalf("a blank customer at level 2: %s", m.Data)
	}
	stopNode(t, n)
	n = startNode(t, dir, nil)
	s, err := n.JetStream().Stream(context.Background(), queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != uint64(len(n.Parts()))+2 {
		t.Fatalf("%d messages after a restart: markers published again", got)
	}
}

// TestSkipResumesStoppedPartition: an operator's way past a command that
// stopped a partition. Node.Skip refuses unless the partition is stopped
// at exactly that command; then it publishes a partition.skip and returns
// its answer. The partition answers the stopped command command_skipped
// (to its publisher, with a warn log line naming the skip), decides again,
// and the skip is recorded. A replay of the stream by this build, and by a
// build that knows the skipped command's version, gives the live index.
func TestSkipResumesStoppedPartition(t *testing.T) {
	logs := &queuetest.SyncBuffer{}
	n := startNode(t, t.TempDir(), logs)
	waitLevel2(t, n)
	const cal = "skip-a"
	pa := queue.PartitionOf(cal, len(n.Parts()))
	submit(t, n, upsert(cal))
	inbox := nats.NewInbox()
	replies, err := n.Conn().SubscribeSync(inbox + ".*")
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, n.JetStream(), cal, mustMarshal(t, book(cal, "before", 0, 4)), actor.SchemaVersion, inbox+".before")
	newer := publishRaw(t, n.JetStream(), cal, newerBody(cal, "newer"), actor.KnownSchemaVersion+1, inbox+".newer")
	publishRaw(t, n.JetStream(), cal, mustMarshal(t, book(cal, "after", 8, 4)), actor.SchemaVersion, inbox+".after")
	waitStopped(t, n, pa)

	ctx := context.Background()
	for _, c := range []struct {
		p    int
		seq  uint64
		want error
	}{{pa, newer + 1, queue.ErrNotStopped}, {pa, newer - 1, queue.ErrNotStopped}, {(pa + 1) % len(n.Parts()), newer, queue.ErrNotStopped},
		{len(n.Parts()), newer, queue.ErrNoPartition}, {-1, newer, queue.ErrNoPartition}} {
		if _, err := n.Skip(ctx, c.p, c.seq); !errors.Is(err, c.want) {
			t.Fatalf("skip of partition %d seq %d: %v, want %v", c.p, c.seq, err, c.want)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	raw, err := n.Skip(sctx, pa, newer)
	if err != nil {
		t.Fatal(err)
	}
	var r actor.Reply
	if err := json.Unmarshal(raw, &r); err != nil || r.Outcome != actor.OutcomeAccepted || r.Type != actor.TypePartitionSkip {
		t.Fatalf("skip answer %s: %v", raw, err)
	}
	queuetest.CheckFor(t, 10*time.Second, n.Ready)
	got := map[string]actor.Reply{}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		for len(got) < 3 {
			m, err := replies.NextMsg(100 * time.Millisecond)
			if err != nil {
				return fmt.Errorf("replies %v", got)
			}
			var r actor.Reply
			if err := json.Unmarshal(m.Data, &r); err != nil {
				return err
			}
			got[m.Subject[len(inbox)+1:]] = r
		}
		return nil
	})
	if got["newer"].Code != actor.CodeCommandSkipped || got["newer"].Seq != newer || got["after"].Outcome != actor.OutcomeAccepted {
		t.Fatalf("replies %+v", got)
	}
	if _, ok, _ := n.Lookup(cal, "newer"); ok {
		t.Error("the skipped command's request id was recorded")
	}
	for _, s := range []string{"level=WARN", "COMMAND SKIPPED BY AN OPERATOR", fmt.Sprintf("seq=%d", newer), fmt.Sprintf("skip_seq=%d", r.Seq),
		"skip_request_id=skip." + fmt.Sprint(newer)} {
		if !strings.Contains(logs.String(), s) {
			t.Fatalf("no %q in the logs:\n%s", s, logs)
		}
	}
	for _, st := range n.PartitionStatuses(ctx) {
		if st.Stalled != nil {
			t.Fatalf("partition %d still stopped: %v", st.Partition, st.Stalled)
		}
	}
	// The same skip again: answered from its record.
	if again, err := n.Skip(ctx, pa, newer); !errors.Is(err, queue.ErrNotStopped) {
		t.Fatalf("skip again: %s %v", again, err)
	}

	live := digestOf(t, n.Store())
	if got := replayInto(t, n.JetStream(), queue.ReplayOptions{}); got.Total != live.Total {
		cal, _ := data.FirstDifference(live, got)
		t.Fatalf("replay differs from the live index, first at %q", cal)
	}
	restore := actor.SetKnownSchemaVersionForTest(actor.KnownSchemaVersion + 1)
	defer restore()
	if got := replayInto(t, n.JetStream(), queue.ReplayOptions{}); got.Total != live.Total {
		cal, _ := data.FirstDifference(live, got)
		t.Fatalf("replay by a build that knows the skipped version differs from the live index, first at %q", cal)
	}
}

// TestClusterMarkersWaitForEveryMember: in cluster mode the markers are
// published only once every live member advertises that it knows schema
// version 2; a member that does not (a build before it) holds them back,
// and the commands of version 3 (series) too. And an instance refuses to
// skip a command that a live member knows.
func TestClusterMarkersWaitForEveryMember(t *testing.T) {
	t.Parallel()
	url := queuetest.StartServer(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The members bucket as an instance creates it, with an instance of
	// an older build in it (no schema in its entry), alive throughout.
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: queue.MembersBucket, TTL: 2 * time.Second,
		LimitMarkerTTL: 2 * time.Second, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	heartbeat := func(ctx context.Context, m queue.Member) {
		b, _ := json.Marshal(m)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := kv.Put(context.Background(), m.ID, b); err != nil {
				t.Error(err)
			}
			select {
			case <-ctx.Done():
				_ = kv.Delete(context.Background(), m.ID)
				return
			case <-tick.C:
			}
		}
	}
	oldCtx, stopOld := context.WithCancel(context.Background())
	oldDone := make(chan struct{})
	go func() { defer close(oldDone); heartbeat(oldCtx, queue.Member{ID: "old-1"}) }()
	defer func() { stopOld(); <-oldDone }()

	logs := &queuetest.SyncBuffer{}
	n1 := startInstance(t, url, "new-1", logs)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if !strings.Contains(logs.String(), "instances_before_it=old-1") {
			return errors.New("the markers do not wait for old-1")
		}
		return nil
	})
	for p, l := range rulesLevels(t, n1) {
		if l != 1 {
			t.Fatalf("partition %d at level %d while an older member is alive", p, l)
		}
	}
	// Nor is a command of version 3 (a series) published: old-1 would
	// stop the partition at it.
	submit(t, n1, upsert("series-c"))
	series := book("series-c", "series-1", 0, 2)
	series.Booking.Recurrence = &actor.RecurrenceSpec{Freq: actor.FreqDaily, Count: 3}
	series.V = series.MinVersion()
	if errs := series.Validate(); len(errs) > 0 || series.V != actor.SeriesSchemaVersion {
		t.Fatalf("series v%d: %v", series.V, errs)
	}
	if _, err := n1.Submit(context.Background(), &series, series.Fingerprint()); !errors.Is(err, queue.ErrUnavailable) || !strings.Contains(err.Error(), "old-1") {
		t.Fatalf("a version 3 command while old-1 is alive: %v", err)
	}
	stopOld()
	<-oldDone
	waitLevel2(t, n1)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		raw, err := n1.Submit(ctx, &series, series.Fingerprint())
		if err != nil {
			return err
		}
		if r, err := actor.UnmarshalReply(raw); err != nil || r.Outcome != actor.OutcomeAccepted || len(r.Occurrences) != 3 {
			return fmt.Errorf("series answered %s (%v)", raw, err)
		}
		return nil
	})

	// A partition stopped at a command of a newer version: no skip while a
	// live member knows that version.
	const cal = "skip-c"
	pa := queue.PartitionOf(cal, len(n1.Parts()))
	submit(t, n1, upsert(cal))
	newer := publishRaw(t, n1.JetStream(), cal, newerBody(cal, "newer"), actor.KnownSchemaVersion+1, "")
	waitStopped(t, n1, pa)
	v3Ctx, stopV3 := context.WithCancel(context.Background())
	v3Done := make(chan struct{})
	go func() {
		defer close(v3Done)
		heartbeat(v3Ctx, queue.Member{ID: "v3-build", Schema: actor.KnownSchemaVersion + 1, Unable: []int{0, 1}})
	}()
	defer func() { stopV3(); <-v3Done }()
	queuetest.CheckFor(t, 20*time.Second, func() error {
		st, _, err := n1.ClusterStatus(context.Background())
		if err != nil || !slices.Contains(st.Members, "v3-build") {
			return fmt.Errorf("members %v: %v", st.Members, err)
		}
		return nil
	})
	if _, err := n1.Skip(context.Background(), pa, newer); !errors.Is(err, queue.ErrNotStopped) || !strings.Contains(err.Error(), "v3-build") {
		t.Fatalf("skip while v3-build is alive: %v", err)
	}
	stopV3()
	<-v3Done
	queuetest.CheckFor(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := n1.Skip(ctx, pa, newer)
		return err
	})
	queuetest.CheckFor(t, 20*time.Second, n1.Ready)
}
