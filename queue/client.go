package queue

import (
	"bytes"
	"context"
	"errors"
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

// RecordLookup answers a command from the index if its request id was
// decided already (see actor.Recorded).
type RecordLookup func(cmd *actor.Command, fingerprint string) (reply []byte, ok bool, err error)

// Client publishes commands and waits for the writer's answer. It holds one
// inbox subscription for the whole process and a table of waiters keyed by
// a per-request token, so a request costs no subscription of its own.
//
// A command is published with core NATS, its reply subject set to the
// request's ack subject: JetStream's publish acknowledgement arrives there
// and the writer's answer on the reply-to subject, through the same
// subscription, in either order. Waiting for the acknowledgement first (a
// JetStream request) cost a round trip's CPU and an extra decode of every
// acknowledgement. NewPublisher gives bulk producers an asynchronous
// publish whose answers come through the same inbox.
type Client struct {
	nc     *nats.Conn
	lookup RecordLookup
	prefix string
	sub    *nats.Subscription

	mu      sync.Mutex
	waiters map[string]*waiter
	pubs    []*Publisher // by the index in their tokens
}

// waiter is one Submit's mailbox: the JetStream acknowledgement and the
// writer's answer, each delivered at most once.
type waiter struct {
	ack   chan *nats.Msg
	reply chan []byte
}

// ackToken prefixes a token in the subject of a publish acknowledgement:
// <prefix>.a.<token>. Reply subjects are <prefix>.<token>; tokens never
// contain a dot. Submit's tokens are nuids ([0-9A-Za-z]); a Publisher's
// start with '_' (pubToken), and replyBatchToken names the subject of the
// answers that come in bulk.
const (
	ackToken        = "a."
	replyBatchToken = "_r"
)

// ClientOption configures NewClient.
type ClientOption func(*Client)

// InboxName makes the client's inbox <prefix>.<name>.<random> instead of
// <prefix>.bookline.<random> (prefix: the connection's inbox prefix,
// _INBOX by default), so that the reply subjects of a process say whose
// they are (docs/protocol.md names bookline import's).
// The name must be a subject token without wildcards: [A-Za-z0-9_-]; any
// other name keeps the default inbox.
func InboxName(name string) ClientOption {
	return func(c *Client) {
		if actor.ValidCalendarID(name) { // the same character set, 1-64
			c.prefix = inboxFor(c.nc, name)
		}
	}
}

// NewClient subscribes the process inbox. lookup answers commands that
// JetStream reports as duplicates (their answer went to the first sender);
// only Submit uses it, so a client that publishes through a Publisher
// alone may pass nil.
func NewClient(nc *nats.Conn, lookup RecordLookup, opts ...ClientOption) (*Client, error) {
	c := &Client{nc: nc, lookup: lookup, prefix: inboxFor(nc, "bookline"), waiters: make(map[string]*waiter)}
	for _, o := range opts {
		o(c)
	}
	sub, err := nc.Subscribe(c.prefix+".>", c.deliver)
	if err != nil {
		return nil, fmt.Errorf("queue: reply inbox: %w", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	c.sub = sub
	return c, nil
}

// Close unsubscribes the inbox; waiting Submits end with their context.
func (c *Client) Close() error {
	if err := c.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return err
	}
	return nil
}

func (c *Client) deliver(m *nats.Msg) {
	token := m.Subject[len(c.prefix)+1:]
	if token == replyBatchToken {
		c.answerBatch(m.Data)
		return
	}
	if t, isAck := strings.CutPrefix(token, ackToken); isAck {
		if p, id, ok := c.pubToken(t); ok {
			p.acked(id, m)
			return
		}
		c.mu.Lock()
		w := c.waiters[t]
		c.mu.Unlock()
		if w != nil {
			select {
			case w.ack <- m: // buffered 1: JetStream acknowledges once
			default:
			}
		}
		return
	}
	c.answer(token, m.Data)
}

// answer hands the writer's reply to the Submit or Publisher waiting for
// token.
func (c *Client) answer(token string, reply []byte) {
	if p, id, ok := c.pubToken(token); ok {
		p.answered(id, reply)
		return
	}
	c.mu.Lock()
	w := c.waiters[token]
	delete(c.waiters, token)
	c.mu.Unlock()
	if w != nil {
		w.reply <- reply // buffered 1, one delivery per token
	}
}

// pubToken finds the Publisher and publish number of a Publisher's token,
// "_<index of the publisher>_<number in base 36>".
func (c *Client) pubToken(token string) (*Publisher, uint64, bool) {
	if len(token) < 4 || token[0] != '_' {
		return nil, 0, false
	}
	pub, num, ok := strings.Cut(token[1:], "_")
	if !ok {
		return nil, 0, false
	}
	i, err1 := strconv.Atoi(pub)
	id, err2 := strconv.ParseUint(num, 36, 64)
	if err1 != nil || err2 != nil {
		return nil, 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.pubs) {
		return nil, 0, false
	}
	return c.pubs[i], id, true
}

// answerBatch hands over the answers a writer sent in bulk (see
// HeaderReplyBatch): lines of "<Bookline-Reply-To> <reply>\n". A line for
// another inbox, or one that cannot be read, is skipped: its command's
// result then stays missing, as with a lost reply.
func (c *Client) answerBatch(data []byte) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if subj, reply, ok := bytes.Cut(line, []byte{' '}); ok {
			c.DeliverLocal(string(subj), reply) // another client's line is skipped
		}
	}
}

// DeliverLocal hands a writer's reply addressed to this client's inbox
// straight to the waiting Submit or Publisher, as if NATS had brought it back, and
// reports whether subject was this client's (if not, the writer publishes
// it). A writer and the API of the same process then skip the round trip
// through the server for every reply: about a quarter of a booking's mean time
// at 2,000 requests/s (docs/benchmarks.md). Acknowledgements still come
// from JetStream: only it can say that a command was stored.
func (c *Client) DeliverLocal(subject string, reply []byte) bool {
	// Checked in place: the writer calls this for every reply.
	rest, ok := strings.CutPrefix(subject, c.prefix)
	if !ok || len(rest) == 0 || rest[0] != '.' {
		return false
	}
	token := rest[1:]
	if strings.HasPrefix(token, ackToken) {
		return false
	}
	c.answer(token, reply)
	return true
}

// MsgID is the Nats-Msg-Id of a command: the same request id with the same
// body dedupes inside the window; with another body it does not, so the
// writer can answer idempotency_key_reused.
func MsgID(cmd *actor.Command, fingerprint string) string {
	return cmd.CalendarID + ":" + cmd.RequestID + ":" + fingerprint
}

// Submit publishes a validated command and waits until the writer answers
// or ctx ends. It returns the encoded actor.Reply, ErrPending when the
// command is stored but undecided at ctx's end, or ErrUnavailable when the
// stream did not take it (or did not say so before ctx's end).
func (c *Client) Submit(ctx context.Context, cmd *actor.Command, fingerprint string) ([]byte, error) {
	token := nuid.Next()
	msg, err := CommandMsg(ctx, cmd, fingerprint, c.prefix+"."+token)
	if err != nil {
		return nil, err
	}
	msg.Reply = c.prefix + "." + ackToken + token
	w := &waiter{ack: make(chan *nats.Msg, 1), reply: make(chan []byte, 1)}
	c.mu.Lock()
	c.waiters[token] = w
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, token)
		c.mu.Unlock()
	}()

	if err := c.nc.PublishMsg(msg); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	acked := false
	for {
		select {
		case reply := <-w.reply:
			return reply, nil
		case m := <-w.ack:
			dup, err := pubAck(m)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
			}
			if dup {
				// The first copy carries another reply subject; read its outcome.
				return c.awaitRecord(ctx, cmd, fingerprint)
			}
			acked = true
		case <-ctx.Done():
			if !acked {
				return nil, fmt.Errorf("%w: no publish acknowledgement: %v", ErrUnavailable, ctx.Err())
			}
			return nil, ErrPending
		}
	}
}

// pubAck reads JetStream's answer to a publish: whether the message was a
// duplicate, or why it was not stored (parsePubAck reads it).
func pubAck(m *nats.Msg) (duplicate bool, err error) {
	if len(m.Data) == 0 && m.Header.Get("Status") != "" {
		// No responders (503): no stream listens on the subject.
		return false, fmt.Errorf("status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
	}
	ack, err := parsePubAck(m.Data)
	var refused *jetstream.APIError
	switch {
	case errors.As(err, &refused):
		return false, fmt.Errorf("publish refused: %s (%d/%d)", refused.Description, refused.Code, refused.ErrorCode)
	case errors.Is(err, jetstream.ErrInvalidJSAck):
		return false, fmt.Errorf("publish acknowledgement %q: %w", m.Data, err)
	case err != nil:
		return false, err
	}
	return ack.Duplicate, nil
}

// awaitRecord polls the request record until it exists or ctx ends.
func (c *Client) awaitRecord(ctx context.Context, cmd *actor.Command, fingerprint string) ([]byte, error) {
	wait := time.Millisecond
	for {
		reply, ok, err := c.lookup(cmd, fingerprint)
		if err != nil {
			return nil, err
		}
		if ok {
			return reply, nil
		}
		select {
		case <-ctx.Done():
			return nil, ErrPending
		case <-time.After(wait):
		}
		wait = min(wait*2, 50*time.Millisecond)
	}
}
