package httpapi

import (
	"math"
	"sync"
	"time"
)

// rateLimiter is a token bucket per caller (API key name): each bucket
// holds up to burst tokens and refills at rate tokens per second; a
// request takes one token or is refused. One mutex
// guards the map and the buckets: the work under it is a few float
// operations, far below the cost of the request it guards.
type rateLimiter struct {
	rate  float64 // tokens per second
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	sweepAt int // sweep idle buckets when the map grows past this
}

type bucket struct {
	tokens float64
	last   time.Time
}

// newRateLimiter returns nil (no limit) when rate <= 0.
func newRateLimiter(rate float64, burst int) *rateLimiter {
	if rate <= 0 {
		return nil
	}
	if burst < 1 {
		burst = max(1, int(math.Ceil(rate)))
	}
	return &rateLimiter{rate: rate, burst: float64(burst), now: time.Now, buckets: map[string]*bucket{}, sweepAt: 1024}
}

// allow takes a token from who's bucket. When none is left it returns false
// and how long until one is.
func (l *rateLimiter) allow(who string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[who]
	if b == nil {
		if len(l.buckets) >= l.sweepAt {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[who] = b
	} else if el := now.Sub(b.last); el > 0 {
		b.tokens = math.Min(l.burst, b.tokens+el.Seconds()*l.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, wait
}

// sweep drops buckets that have refilled completely (forgetting them
// changes nothing), so buckets of keys that went quiet do not pile up.
func (l *rateLimiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
	l.sweepAt = max(1024, 2*len(l.buckets))
}

// retryAfterSeconds rounds a wait up to whole seconds (at least 1), the
// unit of the Retry-After header.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
