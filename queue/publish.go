package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
)

// CommandMsg builds the NATS message of a validated command as bookline's
// producers publish it (docs/protocol.md, "Headers"): the command's subject
// and JSON body; Bookline-Reply-To replyTo, the subject the writer answers
// on; the schema version, request id and content type; ctx's trace id
// (WithTraceID), if it has one; Nats-Msg-Id MsgID(cmd, fingerprint) and
// Nats-Expected-Stream StreamName. The message's own reply subject is left
// to the caller: it is where JetStream acknowledges the publish. The
// headers are written here only, so that every producer sends the same.
func CommandMsg(ctx context.Context, cmd *actor.Command, fingerprint, replyTo string) (*nats.Msg, error) {
	body, err := actor.MarshalCommand(cmd)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: CommandSubject(cmd.CalendarID), Data: body, Header: make(nats.Header, 8)}
	msg.Header.Set(HeaderReplyTo, replyTo)
	msg.Header.Set(HeaderSchema, strconv.Itoa(cmd.V))
	msg.Header.Set(HeaderRequestID, cmd.RequestID)
	if trace := TraceID(ctx); trace != "" {
		msg.Header.Set(HeaderTraceID, trace)
	}
	msg.Header.Set(HeaderContentType, "application/json")
	msg.Header.Set(jetstream.MsgIDHeader, MsgID(cmd, fingerprint))
	msg.Header.Set(jetstream.ExpectedStreamHeader, StreamName)
	return msg, nil
}

// Publisher publishes commands through a Client without waiting for each,
// for bulk producers such as bookline import. Publish returns as soon as
// the command is on its way; at most inFlight publishes await their
// acknowledgement at once; a command's acknowledgement and the writer's
// answer, which arrive in either order, go to its done function together,
// once.
//
// Acknowledgements and answers both come through the client's inbox, as
// Submit's do: the message's reply subject is <inbox>.a.<token>, its
// Bookline-Reply-To <inbox>.<token>, and the token (a counter, see
// pubToken) finds the command in one table without a lookup of its
// headers. The publisher does what a bulk publish needs and nats.go's
// asynchronous JetStream publish did before: it times acknowledgements out
// (one sweep for all of them rather than a timer per message, which was a
// visible share of an import's CPU), retries a publish that no stream
// answered (no responders) for a moment, and fails the publishes awaiting
// their acknowledgement when the connection reconnects, as those
// acknowledgements are lost. The PubAck's stream sequence tells a new
// decision from the recorded answer of an earlier one (a reply whose seq
// is below it).
//
// Commands also ask for their answers in bulk (HeaderReplyBatch): a writer
// that knows the header sends the answers of one batch to the client in a
// few messages instead of one per command; an older writer answers each on
// its own, which arrives the same way.
type Publisher struct {
	c          *Client
	prefix     string // of its tokens: "_<index among the client's publishers>_"
	ackTimeout time.Duration
	room       chan struct{} // one slot per publish awaiting its acknowledgement

	mu sync.Mutex
	// next numbers the publishes (their token).
	next uint64
	// unacked holds the publishes awaiting their acknowledgement, each
	// with its slot in room, also once abandoned; pending the commands
	// whose result is not reported yet. A command is in both until it is
	// acknowledged.
	unacked map[uint64]*published
	pending map[uint64]*published
	// sweeping is set while the goroutine that times out acknowledgements
	// runs; it stops when nothing awaits one.
	sweeping bool
}

// published is a command whose result is not complete yet.
type published struct {
	msg      *nats.Msg // kept until acknowledged, to publish it again
	done     func(PublishResult)
	deadline time.Time // of its acknowledgement
	retries  int       // publishes again after no responders
	ack      *jetstream.PubAck
	reply    []byte
	answered bool
}

// PublishResult is what became of a command a Publisher published.
type PublishResult struct {
	// Err is why the stream did not take the command: refused (the
	// stream's error), no stream listening (jetstream.ErrNoStreamResponse,
	// after a few attempts), or no acknowledgement within the timeout
	// (jetstream.ErrAsyncPublishTimeout) or before a reconnect
	// (nats.ErrDisconnected); in the last two cases it may be stored and
	// decided all the same. Ack and Reply are nil.
	Err error
	// Ack is the stream's acknowledgement. With Ack.Duplicate JetStream
	// dropped the command inside its dedupe window: the first copy is
	// decided, its answer goes to that copy's reply subject, and Reply is
	// nil.
	Ack *jetstream.PubAck
	// Reply is the writer's encoded actor.Reply.
	Reply []byte
}

// A publish that no stream answered (no responders: a stream being created
// or a server restarting) is tried again pubRetries times, pubRetryWait
// apart, as nats.go's asynchronous publish does.
const (
	pubRetries   = 2
	pubRetryWait = 250 * time.Millisecond
)

// NewPublisher returns a publisher of at most inFlight publishes awaiting
// their acknowledgement, each for at most ackTimeout. It lives as long as
// the client's connection.
func (c *Client) NewPublisher(inFlight int, ackTimeout time.Duration) (*Publisher, error) {
	if inFlight < 1 || ackTimeout <= 0 {
		// Without a timeout a lost acknowledgement would hold its room
		// for good.
		return nil, fmt.Errorf("queue: publisher needs inFlight >= 1 and ackTimeout > 0, got %d and %s", inFlight, ackTimeout)
	}
	p := &Publisher{c: c, ackTimeout: ackTimeout, room: make(chan struct{}, inFlight),
		unacked: make(map[uint64]*published), pending: make(map[uint64]*published)}
	c.mu.Lock()
	p.prefix = "_" + strconv.Itoa(len(c.pubs)) + "_"
	c.pubs = append(c.pubs, p)
	c.mu.Unlock()
	status := c.nc.StatusChanged(nats.RECONNECTING, nats.CLOSED)
	go p.watch(status)
	return p, nil
}

// Publish publishes a validated command (with ctx's trace id, as Submit
// does), waiting only for room among the publishes in flight. It returns
// an error if the command cannot be encoded or ctx ends before there is
// room; then nothing was published and done is never called. Otherwise
// done gets the command's result later, or before Publish returns when
// the connection refuses the publish at once. done must not block and must
// not call the Publisher: it runs with the publisher's lock held, on the
// client's subscription goroutine, on a timer's, or on a partition writer's
// when the client's inbox is that process's own.
func (p *Publisher) Publish(ctx context.Context, cmd *actor.Command, fingerprint string, done func(PublishResult)) error {
	p.mu.Lock()
	id := p.next
	p.next++
	p.mu.Unlock()
	token := p.prefix + strconv.FormatUint(id, 36)
	msg, err := CommandMsg(ctx, cmd, fingerprint, p.c.prefix+"."+token)
	if err != nil {
		return err
	}
	msg.Header.Set(HeaderReplyBatch, p.c.prefix+"."+replyBatchToken)
	msg.Reply = p.c.prefix + "." + ackToken + token
	select {
	case p.room <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	cmdp := &published{msg: msg, done: done, deadline: time.Now().Add(p.ackTimeout)}
	p.mu.Lock()
	p.unacked[id] = cmdp
	p.pending[id] = cmdp
	if !p.sweeping {
		p.sweeping = true
		go p.sweep()
	}
	p.mu.Unlock()
	if err := p.c.nc.PublishMsg(msg); err != nil {
		p.fail(id, err)
	}
	return nil
}

// Pending is the number of published commands whose result has not been
// reported.
func (p *Publisher) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

// Abandon stops waiting for every pending command and returns how many
// there were. Their results are never reported: a late acknowledgement or
// answer is dropped. A publish still awaiting its acknowledgement keeps
// its room until it is acknowledged, after ackTimeout at the latest.
func (p *Publisher) Abandon() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.pending)
	clear(p.pending)
	return n
}

// acked takes JetStream's answer to publish id from the client's inbox.
func (p *Publisher) acked(id uint64, m *nats.Msg) {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		p.noResponders(id)
		return
	}
	ack, err := parsePubAck(m.Data)
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := p.unacked[id]
	if cmd == nil {
		return // timed out or failed already: the result was reported
	}
	p.releaseLocked(id, cmd)
	switch {
	case p.pending[id] == nil: // abandoned
	case err != nil:
		p.finishLocked(id, cmd, PublishResult{Err: err})
	case ack.Duplicate:
		// No answer comes for the copy JetStream dropped.
		p.finishLocked(id, cmd, PublishResult{Ack: ack})
	case cmd.answered:
		p.finishLocked(id, cmd, PublishResult{Ack: ack, Reply: cmd.reply})
	default:
		cmd.ack = ack
	}
}

// noResponders publishes id again a moment later, or fails it once its
// retries are used up.
func (p *Publisher) noResponders(id uint64) {
	p.mu.Lock()
	cmd := p.unacked[id]
	if cmd == nil || cmd.retries >= pubRetries {
		p.mu.Unlock()
		if cmd != nil {
			p.fail(id, jetstream.ErrNoStreamResponse)
		}
		return
	}
	cmd.retries++
	cmd.deadline = time.Now().Add(pubRetryWait + p.ackTimeout)
	msg := cmd.msg
	p.mu.Unlock()
	time.AfterFunc(pubRetryWait, func() {
		p.mu.Lock()
		again := p.unacked[id] == cmd
		p.mu.Unlock()
		if again {
			if err := p.c.nc.PublishMsg(msg); err != nil {
				p.fail(id, err)
			}
		}
	})
}

// answered takes the writer's answer to publish id from the client.
func (p *Publisher) answered(id uint64, reply []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := p.pending[id]
	switch {
	case cmd == nil: // abandoned, reported, or dropped as a duplicate
	case cmd.ack != nil:
		p.finishLocked(id, cmd, PublishResult{Ack: cmd.ack, Reply: reply})
	default:
		cmd.reply, cmd.answered = reply, true
	}
}

// fail reports that publish id was not acknowledged and will not be.
func (p *Publisher) fail(id uint64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failLocked(id, err)
}

func (p *Publisher) failLocked(id uint64, err error) {
	cmd := p.unacked[id]
	if cmd == nil {
		return
	}
	p.releaseLocked(id, cmd)
	if p.pending[id] != nil {
		p.finishLocked(id, cmd, PublishResult{Err: err})
	}
}

// releaseLocked ends cmd's wait for its acknowledgement and gives its room
// back; p.mu is held.
func (p *Publisher) releaseLocked(id uint64, cmd *published) {
	delete(p.unacked, id)
	cmd.msg = nil
	<-p.room
}

// finishLocked reports cmd's result and forgets it; p.mu is held.
func (p *Publisher) finishLocked(id uint64, cmd *published, r PublishResult) {
	delete(p.pending, id)
	cmd.reply = nil
	cmd.done(r)
}

// sweep fails the publishes whose acknowledgement is overdue, until none
// awaits one.
func (p *Publisher) sweep() {
	every := min(max(p.ackTimeout/8, time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		now := time.Now()
		p.mu.Lock()
		for id, cmd := range p.unacked {
			if now.After(cmd.deadline) {
				p.failLocked(id, jetstream.ErrAsyncPublishTimeout)
			}
		}
		if len(p.unacked) == 0 {
			p.sweeping = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// watch fails the publishes awaiting their acknowledgement when the
// connection starts to reconnect: acknowledgements sent meanwhile are lost.
// The commands may be stored all the same (the caller publishes them again
// under the same Nats-Msg-Id).
func (p *Publisher) watch(status chan nats.Status) {
	for st := range status {
		if st == nats.CLOSED {
			return
		}
		p.mu.Lock()
		for id := range p.unacked {
			p.failLocked(id, nats.ErrDisconnected)
		}
		p.mu.Unlock()
	}
}

// parsePubAck reads JetStream's answer to a publish of a command (see
// parseStreamAck).
func parsePubAck(data []byte) (*jetstream.PubAck, error) { return parseStreamAck(data, StreamName) }

// parseStreamAck reads JetStream's answer to a publish to stream: a
// PubAck, or an error answer (the stream refused the message), returned as
// the *jetstream.APIError it carries. The answers of every publish, a
// PubAck without an error, are read by actor's JSON reader
// (ParseObjectFast: the result of encoding/json, without its reflection,
// whatever the member order and spacing); anything else is decoded.
func parseStreamAck(data []byte, stream string) (*jetstream.PubAck, error) {
	ack := new(jetstream.PubAck)
	var name []byte // compared, not kept: stream is the string to keep
	if actor.ParseObjectFast(data, []actor.FastField{{Name: "stream", Bytes: &name}, {Name: "seq", Uint: &ack.Sequence},
		{Name: "duplicate", Bool: &ack.Duplicate}, {Name: "domain", Str: &ack.Domain}}) {
		if string(name) != stream {
			return nil, fmt.Errorf("publish acknowledged by stream %q", name)
		}
		ack.Stream = stream
		return ack, nil
	}
	var full struct {
		Error *jetstream.APIError `json:"error"`
		jetstream.PubAck
	}
	if err := json.Unmarshal(data, &full); err != nil {
		return nil, fmt.Errorf("%w: %q", jetstream.ErrInvalidJSAck, data)
	}
	switch {
	case full.Error != nil:
		return nil, full.Error
	case full.Stream != stream:
		return nil, fmt.Errorf("publish acknowledged by stream %q", full.Stream)
	}
	return &full.PubAck, nil
}
