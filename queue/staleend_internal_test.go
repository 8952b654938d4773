package queue

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// answersStream answers Info with infos in turn, the last one from then on.
type answersStream struct {
	jetstream.Stream
	infos []*jetstream.StreamInfo
	calls int
	msg   *jetstream.RawStreamMsg
}

// GetMsg answers with msg wherever it is asked.
func (s *answersStream) GetMsg(context.Context, uint64, ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	return s.msg, nil
}

func (s *answersStream) Info(context.Context, ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	info := s.infos[min(s.calls, len(s.infos)-1)]
	s.calls++
	return info, nil
}

// A stream that ends before what the index applied is asked again: right
// after a partition heals, a deposed leader may answer with its stale copy.
func TestStreamEndingBeforeTheIndexIsAskedAgain(t *testing.T) {
	defer func(w time.Duration) { staleEndWait = w }(staleEndWait)
	staleEndWait = time.Millisecond
	created := time.Unix(1_800_000_000, 0)
	info := func(name string, last uint64) *jetstream.StreamInfo {
		return &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: name, Replicas: 3}, Created: created,
			State: jetstream.StreamState{LastSeq: last}}
	}
	known := streamIdentity(info(StreamName, 0))
	applied := map[int]uint64{0: 120, 2: 184}
	ctx := context.Background()

	// A stale answer, then the leader's.
	s := &answersStream{infos: []*jetstream.StreamInfo{info(StreamName, 88), info(StreamName, 200)}}
	if got, err := streamInfoNotBehind(ctx, s, known, applied); err != nil || got.State.LastSeq != 200 || s.calls != 2 {
		t.Fatalf("stale then fresh: last %d after %d calls, err %v; want 200 after 2", got.State.LastSeq, s.calls, err)
	}
	// A stream that really ends early: its answer, after staleEndTries.
	s = &answersStream{infos: []*jetstream.StreamInfo{info(StreamName, 88)}}
	if got, err := streamInfoNotBehind(ctx, s, known, applied); err != nil || got.State.LastSeq != 88 || s.calls != staleEndTries {
		t.Fatalf("short stream: last %d after %d calls, err %v; want 88 after %d", got.State.LastSeq, s.calls, err, staleEndTries)
	}
	// Another stream (recreated), one not behind, or a single server's
	// (no leader to be deposed): asked once.
	single := info(StreamName, 88)
	single.Config.Replicas = 1
	for _, first := range []*jetstream.StreamInfo{info("OTHER", 5), info(StreamName, 184), single} {
		s = &answersStream{infos: []*jetstream.StreamInfo{first, info(StreamName, 300)}}
		if got, err := streamInfoNotBehind(ctx, s, known, applied); err != nil || got != first || s.calls != 1 {
			t.Fatalf("%s at %d: asked %d times, err %v; want once", first.Config.Name, first.State.LastSeq, s.calls, err)
		}
	}
}

// A catch-up's check of the applied message asks again too: a stale
// answer there would refuse the partition as if the stream lost its tail.
func TestCatchUpCheckAsksAStreamEndingBeforeTheIndexAgain(t *testing.T) {
	defer func(w time.Duration) { staleEndWait = w }(staleEndWait)
	staleEndWait = time.Millisecond
	store, err := data.Open(filepath.Join(t.TempDir(), "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	at := time.Unix(1_800_000_000, 0).UTC()
	msg := &jetstream.RawStreamMsg{Subject: PartitionSubjectPrefix + "0.cal", Sequence: 184, Time: at, Data: []byte(`{"v":1}`)}
	hash := actor.MessageHash(actor.Input{At: at, SubjectCalendar: "cal", Data: msg.Data})
	if err := store.Commit(func(tx *data.Tx) error { return tx.SetApplied(0, 184, hash) }); err != nil {
		t.Fatal(err)
	}
	info := func(last uint64) *jetstream.StreamInfo {
		return &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: StreamName, Replicas: 3},
			State: jetstream.StreamState{FirstSeq: 1, LastSeq: last}}
	}
	s := &answersStream{infos: []*jetstream.StreamInfo{info(200)}, msg: msg}
	p := &Partition{ID: 0, store: store, cluster: &clusterMode{stream: s}}
	if err := p.checkApplied(context.Background(), info(88)); err != nil || s.calls != 1 {
		t.Fatalf("stale answer at hand: %v after %d more answers; want nil after 1", err, s.calls)
	}
}
