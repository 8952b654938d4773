package queue

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// eventAcks collects the event stream's acknowledgements of one drain's
// publishes through a subscription of its own: each publish's reply
// subject is <inbox>.<drain>.<index>. nats.go's asynchronous publish kept a
// future with two channels and a map entry per event, and decoded each
// PubAck with encoding/json; for the event publisher, which publishes an
// event per decided command, that was most of its CPU beside the events
// themselves.
type eventAcks struct {
	nc     *nats.Conn
	prefix string

	mu   sync.Mutex
	sub  *nats.Subscription
	cur  *ackRound
	next uint64
}

// ackRound is one drain's publishes awaiting their acknowledgements.
type ackRound struct {
	gen    string
	res    []error // nil: acknowledged (once acked[i])
	acked  []bool
	left   int
	newest uint64 // highest stream sequence acknowledged
	done   chan struct{}
}

func newEventAcks(nc *nats.Conn) *eventAcks {
	return &eventAcks{nc: nc, prefix: inboxFor(nc, "bookline-events")}
}

// start begins a round of n publishes; the previous round's late
// acknowledgements are dropped from now on.
func (a *eventAcks) start(n int) (*ackRound, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sub == nil {
		sub, err := a.nc.Subscribe(a.prefix+".>", a.deliver)
		if err != nil {
			return nil, fmt.Errorf("queue: event acknowledgements: %w", err)
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			return nil, err
		}
		a.sub = sub
	}
	a.next++
	r := &ackRound{gen: strconv.FormatUint(a.next, 36), res: make([]error, n), acked: make([]bool, n), left: n,
		done: make(chan struct{})}
	if n == 0 {
		close(r.done)
	}
	a.cur = r
	return r, nil
}

// reply is the reply subject of the round's publish i.
func (a *eventAcks) reply(r *ackRound, i int) string {
	return a.prefix + "." + r.gen + "." + strconv.Itoa(i)
}

// settle records the result of publish i of r (once).
func (a *eventAcks) settle(r *ackRound, i int, seq uint64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i < 0 || i >= len(r.acked) || r.acked[i] {
		return
	}
	r.acked[i], r.res[i] = true, err
	if err == nil {
		r.newest = max(r.newest, seq)
	}
	if r.left--; r.left == 0 {
		close(r.done)
	}
}

func (a *eventAcks) deliver(m *nats.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, a.prefix)
	if ok {
		rest, ok = strings.CutPrefix(rest, ".")
	}
	if !ok {
		return
	}
	gen, idx, ok := strings.Cut(rest, ".")
	if !ok {
		return
	}
	i, err := strconv.Atoi(idx)
	if err != nil {
		return
	}
	a.mu.Lock()
	r := a.cur
	a.mu.Unlock()
	if r == nil || gen != r.gen {
		return // a round given up on
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		a.settle(r, i, 0, jetstream.ErrNoStreamResponse)
		return
	}
	// A duplicate (stored before: a re-send after a crash) is as good as
	// stored now: parseStreamAck returns it without an error.
	ack, err := parseStreamAck(m.Data, EventStreamName)
	var seq uint64
	if ack != nil {
		seq = ack.Sequence
	}
	a.settle(r, i, seq, err)
}
