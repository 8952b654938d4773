package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

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
	body, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: CommandSubject(cmd.CalendarID), Data: body, Header: make(nats.Header, 8)}
	msg.Header.Set(HeaderReplyTo, replyTo)
	msg.Header.Set(HeaderSchema, strconv.Itoa(actor.SchemaVersion))
	msg.Header.Set(HeaderRequestID, cmd.RequestID)
	if trace := actor.TraceID(ctx); trace != "" {
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
// Acknowledgements come through nats.go's asynchronous JetStream publish,
// not through the client's inbox as Submit's do: it times them out,
// retries a publish that no stream answered (no responders) for a moment,
// and fails the outstanding ones when the connection reconnects, as a bulk
// publish wants; and its PubAck has the stream sequence, which tells a new
// decision from the recorded answer of an earlier one (a reply whose seq
// is below it). Answers come through the client's inbox and table of
// waiters, so DeliverLocal hands them over as it does Submit's.
type Publisher struct {
	c    *Client
	js   jetstream.JetStream
	room chan struct{} // one slot per publish awaiting its acknowledgement

	mu      sync.Mutex
	pending map[string]*published // by reply token
}

// published is a command whose result is not complete yet.
type published struct {
	done     func(PublishResult)
	ack      *jetstream.PubAck
	reply    []byte
	answered bool
}

// PublishResult is what became of a command a Publisher published.
type PublishResult struct {
	// Err is why the stream did not take the command, as nats.go's
	// JetStream publish reports it: refused, no stream listening, or no
	// acknowledgement within the timeout or before a reconnect (then it may
	// be stored and decided all the same). Ack and Reply are nil.
	Err error
	// Ack is the stream's acknowledgement. With Ack.Duplicate JetStream
	// dropped the command inside its dedupe window: the first copy is
	// decided, its answer goes to that copy's reply subject, and Reply is
	// nil.
	Ack *jetstream.PubAck
	// Reply is the writer's encoded actor.Reply.
	Reply []byte
}

// NewPublisher returns a publisher of at most inFlight publishes awaiting
// their acknowledgement, each for at most ackTimeout. It lives as long as
// the client's connection.
func (c *Client) NewPublisher(inFlight int, ackTimeout time.Duration) (*Publisher, error) {
	if inFlight < 1 || ackTimeout <= 0 {
		// Without a timeout a lost acknowledgement would hold its room
		// for good.
		return nil, fmt.Errorf("queue: publisher needs inFlight >= 1 and ackTimeout > 0, got %d and %s", inFlight, ackTimeout)
	}
	p := &Publisher{c: c, room: make(chan struct{}, inFlight), pending: make(map[string]*published)}
	var err error
	p.js, err = jetstream.New(c.nc,
		jetstream.WithPublishAsyncMaxPending(inFlight),
		jetstream.WithPublishAsyncTimeout(ackTimeout),
		jetstream.WithPublishAsyncAckHandler(p.acked),
		jetstream.WithPublishAsyncErrHandler(p.failed))
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Publish publishes a validated command (with ctx's trace id, as Submit
// does), waiting only for room among the publishes in flight. It returns
// an error if the command cannot be encoded or ctx ends before there is
// room; then nothing was published and done is never called. Otherwise
// done gets the command's result later, or before Publish returns when
// nats.go refuses the publish at once. done must not block and must not call
// the Publisher: it runs with the publisher's lock held, on a NATS goroutine
// (an acknowledgement timeout holds nats.go's publish lock too), or on a
// partition writer's when the client's inbox is that process's own.
func (p *Publisher) Publish(ctx context.Context, cmd *actor.Command, fingerprint string, done func(PublishResult)) error {
	token := nuid.Next()
	msg, err := CommandMsg(ctx, cmd, fingerprint, p.c.prefix+"."+token)
	if err != nil {
		return err
	}
	select {
	case p.room <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	// Both entries under the publisher's lock, as Abandon takes them
	// away: never a waiter without its pending entry.
	p.mu.Lock()
	p.pending[token] = &published{done: done}
	p.c.mu.Lock()
	p.c.waiters[token] = &waiter{pub: p}
	p.c.mu.Unlock()
	p.mu.Unlock()
	if _, err := p.js.PublishMsgAsync(msg); err != nil {
		<-p.room
		p.finish(token, PublishResult{Err: err})
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
// its room until nats.go reports on it, after ackTimeout at the latest.
func (p *Publisher) Abandon() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.pending)
	p.c.mu.Lock()
	for token := range p.pending {
		delete(p.c.waiters, token)
	}
	p.c.mu.Unlock()
	clear(p.pending)
	return n
}

// token is the reply token of a message Publish built.
func (p *Publisher) token(m *nats.Msg) string {
	return strings.TrimPrefix(m.Header.Get(HeaderReplyTo), p.c.prefix+".")
}

func (p *Publisher) acked(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
	<-p.room
	token := p.token(m)
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := p.pending[token]
	switch {
	case cmd == nil: // abandoned
	case ack.Duplicate:
		// No answer comes for the copy JetStream dropped.
		p.finishLocked(token, cmd, PublishResult{Ack: ack})
	case cmd.answered:
		p.finishLocked(token, cmd, PublishResult{Ack: ack, Reply: cmd.reply})
	default:
		cmd.ack = ack
	}
}

func (p *Publisher) failed(_ jetstream.JetStream, m *nats.Msg, err error) {
	<-p.room
	p.finish(p.token(m), PublishResult{Err: err})
}

// answered takes the writer's answer to token from Client.answer.
func (p *Publisher) answered(token string, reply []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := p.pending[token]
	switch {
	case cmd == nil: // abandoned, or dropped as a duplicate
	case cmd.ack != nil:
		p.finishLocked(token, cmd, PublishResult{Ack: cmd.ack, Reply: reply})
	default:
		cmd.reply, cmd.answered = reply, true
	}
}

func (p *Publisher) finish(token string, r PublishResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cmd := p.pending[token]; cmd != nil {
		p.finishLocked(token, cmd, r)
	}
}

// finishLocked reports cmd's result and forgets it, along with its waiter
// if no answer took that already; p.mu is held.
func (p *Publisher) finishLocked(token string, cmd *published, r PublishResult) {
	delete(p.pending, token)
	if r.Reply == nil {
		p.c.mu.Lock()
		delete(p.c.waiters, token)
		p.c.mu.Unlock()
	}
	cmd.done(r)
}
