package queue

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A caller that arrives while a round is out waits for the next round,
// whose request is sent after it arrived; the callers waiting together
// share one request.
func TestLastSeqsRoundsStartAfterTheirCallers(t *testing.T) {
	var sent atomic.Uint64 // the stream's last sequence, as of each request
	gate := make(chan struct{})
	var fetches atomic.Int32
	l := &lastSeqs{timeout: 10 * time.Second, fetch: func(ctx context.Context, subject string) (uint64, error) {
		fetches.Add(1)
		seq := sent.Add(1) // the state as of the moment the request is sent
		<-gate
		return seq, nil
	}}
	first := make(chan uint64)
	go func() {
		seq, err := l.get(context.Background(), "s")
		if err != nil {
			t.Error(err)
		}
		first <- seq
	}()
	deadline := time.Now().Add(10 * time.Second)
	for fetches.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no request sent")
		}
		time.Sleep(time.Millisecond)
	}
	// Ten callers arrive while round 1 is out.
	var wg sync.WaitGroup
	got := make([]uint64, 10)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq, err := l.get(context.Background(), "s")
			if err != nil {
				t.Error(err)
			}
			got[i] = seq
		}()
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		r := l.next["s"]
		joined := r != nil && r.waiters == len(got)
		l.mu.Unlock()
		if joined {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the callers did not join a round")
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	if seq := <-first; seq != 1 {
		t.Fatalf("first caller: %d, want 1", seq)
	}
	wg.Wait()
	for i, seq := range got {
		if seq != 2 {
			t.Fatalf("caller %d got %d: it must wait for a round sent after it arrived (2)", i, seq)
		}
	}
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d requests for 11 callers in two rounds, want 2", n)
	}
	// A caller whose context ends stops waiting.
	gate2 := make(chan struct{})
	l.fetch = func(ctx context.Context, subject string) (uint64, error) { <-gate2; return 9, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := l.get(ctx, "t"); err == nil {
		t.Fatal("a caller whose context ended got an answer")
	}
	close(gate2)
}
