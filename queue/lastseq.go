package queue

import (
	"context"
	"errors"
	"sync"
	"time"
)

// lastSeqs shares the stream requests that find a calendar's last logged
// message (syncTo) among the callers waiting for the same subject, as
// etcd batches its read-index requests. A caller joins the next round for
// its subject: a round's request is sent only after every caller in it
// arrived, so the sequence it returns is at least the one each caller
// would have got alone, and a read or refusal that waits for it is still
// ordered after every command logged before the caller arrived. While a
// round is out, the callers that arrive wait for the next, which is sent
// when the round returns: under load one request per subject is in flight,
// not one per caller (64 clients booking one calendar sent 64; now about
// one per round trip).
type lastSeqs struct {
	fetch func(ctx context.Context, subject string) (uint64, error)
	// timeout bounds one round's request; a caller gives up earlier when
	// its own context ends.
	timeout time.Duration

	mu      sync.Mutex
	next    map[string]*seqRound // the round that callers join, per subject
	running map[string]bool      // a round of the subject is out
}

var errNoStream = errors.New("queue: no command stream to ask")

type seqRound struct {
	waiters int // callers in the round (under lastSeqs.mu)
	done    chan struct{}
	seq     uint64
	err     error
}

// get returns the subject's last stream sequence as of a moment after the
// call began.
func (l *lastSeqs) get(ctx context.Context, subject string) (uint64, error) {
	if l.fetch == nil {
		return 0, errNoStream
	}
	l.mu.Lock()
	if l.next == nil {
		l.next, l.running = map[string]*seqRound{}, map[string]bool{}
	}
	r := l.next[subject]
	if r == nil {
		r = &seqRound{done: make(chan struct{})}
		l.next[subject] = r
		if !l.running[subject] {
			l.running[subject] = true
			go l.run(subject)
		}
	}
	r.waiters++
	l.mu.Unlock()
	select {
	case <-r.done:
		return r.seq, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// run sends the subject's rounds one after another until no caller waits.
func (l *lastSeqs) run(subject string) {
	for {
		l.mu.Lock()
		r := l.next[subject]
		if r == nil {
			delete(l.running, subject)
			l.mu.Unlock()
			return
		}
		delete(l.next, subject) // callers from now on join the round after it
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		r.seq, r.err = l.fetch(ctx, subject)
		cancel()
		close(r.done)
	}
}
