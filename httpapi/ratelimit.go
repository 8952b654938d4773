package httpapi

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// rateLimiter keeps a token bucket (golang.org/x/time/rate) per caller (API
// key name): each holds up to burst tokens and refills at rate tokens per
// second; a request takes its cost in tokens (one for most) or is refused
// with the time until they are there. One mutex guards the map and the
// buckets: the work under it is a few float operations, far below the cost
// of the request it guards.
type rateLimiter struct {
	rate  rate.Limit // tokens per second
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	sweepAt int // sweep idle buckets when the map grows past this
}

// newRateLimiter returns nil (no limit) when perSecond <= 0.
func newRateLimiter(perSecond float64, burst int) *rateLimiter {
	if perSecond <= 0 {
		return nil
	}
	if burst < 1 {
		burst = max(1, int(math.Ceil(perSecond)))
	}
	return &rateLimiter{rate: rate.Limit(perSecond), burst: burst, now: time.Now, buckets: map[string]*rate.Limiter{}, sweepAt: 1024}
}

// allowN takes n tokens (1 <= n <= burst) from who's bucket. When it does
// not hold them it returns false and how long until it does. The clock is
// read and the bucket used under the lock: a rate.Limiter given times out
// of order credits the same interval twice, and the sweep must not drop a
// bucket in use.
func (l *rateLimiter) allowN(who string, n int) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[who]
	if b == nil {
		if len(l.buckets) >= l.sweepAt {
			l.sweep(now)
		}
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[who] = b
	}
	if b.AllowN(now, n) {
		return true, 0
	}
	// A refusal takes no token (a reservation would, until cancelled).
	wait := time.Duration((float64(n) - b.TokensAt(now)) / float64(l.rate) * float64(time.Second))
	return false, max(wait, time.Millisecond)
}

// sweep drops buckets that have refilled completely (forgetting them
// changes nothing), so buckets of keys that went quiet do not pile up.
func (l *rateLimiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
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
