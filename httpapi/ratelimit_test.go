package httpapi

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
)

// TestRateLimiterConcurrent: with the clock stopped, N goroutines hammering
// one bucket get exactly burst tokens between them; after the clock moves
// by d exactly rate*d more; other buckets are independent.
func TestRateLimiterConcurrent(t *testing.T) {
	var clock atomic.Int64
	t0 := time.Unix(1_700_000_000, 0)
	l := newRateLimiter(10, 50)
	l.now = func() time.Time { return t0.Add(time.Duration(clock.Load())) }
	run := func(who string, goroutines, each int) (ok int64, waits []time.Duration) {
		var n atomic.Int64
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					if allowed, wait := l.allowN(who, 1); allowed {
						n.Add(1)
					} else {
						mu.Lock()
						waits = append(waits, wait)
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		return n.Load(), waits
	}
	if ok, waits := run("a", 64, 40); ok != 50 || len(waits) != 64*40-50 {
		t.Fatalf("frozen clock: %d allowed, %d refused; want 50", ok, len(waits))
	} else {
		for _, w := range waits {
			if w <= 0 || w > 100*time.Millisecond {
				t.Fatalf("wait %s, want (0, 100ms]", w)
			}
		}
	}
	if ok, _ := run("b", 8, 10); ok != 50 {
		t.Fatalf("second key: %d allowed", ok)
	}
	clock.Add(int64(2 * time.Second)) // 20 tokens
	if ok, _ := run("a", 64, 10); ok != 20 {
		t.Fatalf("after 2s: %d allowed, want 20", ok)
	}
	clock.Add(int64(time.Hour)) // refills to the burst, not beyond
	if ok, _ := run("a", 16, 10); ok != 50 {
		t.Fatalf("after an hour: %d allowed, want the burst 50", ok)
	}
	if got := retryAfterSeconds(1500 * time.Millisecond); got != 2 {
		t.Fatalf("retry after 1.5s = %d", got)
	}
	if got := retryAfterSeconds(time.Millisecond); got != 1 {
		t.Fatalf("retry after 1ms = %d", got)
	}
}

func TestRateLimiterSweepsIdleBuckets(t *testing.T) {
	var clock atomic.Int64
	l := newRateLimiter(1, 1)
	l.now = func() time.Time { return time.Unix(0, clock.Load()) }
	for i := 0; i < 3000; i++ {
		l.allowN(string(rune('a'+i%26))+time.Duration(i).String(), 1)
		if i%100 == 0 {
			clock.Add(int64(2 * time.Second))
		}
	}
	if n := len(l.buckets); n > 2100 {
		t.Fatalf("%d buckets kept", n)
	}
	if newRateLimiter(0, 5) != nil {
		t.Fatal("rate 0 must mean no limiter")
	}
}

func TestDecisionOutcome(t *testing.T) {
	for _, tc := range []struct {
		r            actor.Reply
		outcome, why string
	}{
		{actor.Reply{Outcome: "accepted"}, "accepted", "none"},
		{actor.Reply{Outcome: "rejected", Code: "slot_taken"}, "rejected", "slot_taken"},
		{actor.Reply{Outcome: "rejected", Code: "hold_expired"}, "rejected", "hold_expired"},
		{actor.Reply{Outcome: "rejected", Code: "Not A Code"}, "rejected", "other"},
		{actor.Reply{}, "unknown", "other"},
	} {
		if o, r := decisionOutcome(&tc.r); o != tc.outcome || r != tc.why {
			t.Errorf("%+v: %s/%s, want %s/%s", tc.r, o, r, tc.outcome, tc.why)
		}
	}
}

// BenchmarkRateLimiterAllow: one token per request, from many goroutines
// over 16 keys, with tokens to spare.
func BenchmarkRateLimiterAllow(b *testing.B) {
	l := newRateLimiter(1e9, 1e9)
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = "key:" + string(rune('a'+i))
	}
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		k := keys[n.Add(1)%int64(len(keys))]
		for pb.Next() {
			if ok, _ := l.allowN(k, 1); !ok {
				b.Fatal("refused")
			}
		}
	})
}
