package queue

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// answersStream answers Info with infos in turn, the last one from then on.
type answersStream struct {
	jetstream.Stream
	infos []*jetstream.StreamInfo
	calls int
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
