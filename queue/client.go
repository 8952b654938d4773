package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/bookline/bookline/actor"
)

// Errors of Submit.
var (
	// ErrUnavailable means the command could not be stored in the stream:
	// nothing was decided, the caller may retry.
	ErrUnavailable = errors.New("queue: command stream unavailable")
	// ErrPending means the command is stored (it will be decided) but no
	// answer arrived in time; its outcome can be read later by request id.
	ErrPending = errors.New("queue: command stored, outcome pending")
)

// RecordLookup answers a command from the index if its request id was
// decided already (see actor.Recorded).
type RecordLookup func(cmd *actor.Command, fingerprint string) (reply []byte, ok bool, err error)

// Client publishes commands and waits for the writer's answer. It holds one
// inbox subscription for the whole process and a table of waiters keyed by
// a per-request token, so a request costs no subscription of its own.
type Client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	lookup RecordLookup
	prefix string
	sub    *nats.Subscription

	mu      sync.Mutex
	waiters map[string]chan []byte
}

// NewClient subscribes the process inbox. lookup answers commands that
// JetStream reports as duplicates (their answer went to the first sender).
func NewClient(nc *nats.Conn, js jetstream.JetStream, lookup RecordLookup) (*Client, error) {
	c := &Client{nc: nc, js: js, lookup: lookup, prefix: "_INBOX.bookline." + nuid.Next(), waiters: make(map[string]chan []byte)}
	sub, err := nc.Subscribe(c.prefix+".*", c.deliver)
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
	c.mu.Lock()
	ch := c.waiters[token]
	delete(c.waiters, token)
	c.mu.Unlock()
	if ch != nil {
		ch <- m.Data // buffered 1, one delivery per token
	}
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
// stream did not take it.
func (c *Client) Submit(ctx context.Context, cmd *actor.Command, fingerprint string) ([]byte, error) {
	body, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	token := nuid.Next()
	ch := make(chan []byte, 1)
	c.mu.Lock()
	c.waiters[token] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, token)
		c.mu.Unlock()
	}()

	msg := nats.NewMsg(CommandSubject(cmd.CalendarID))
	msg.Data = body
	msg.Header.Set(HeaderReplyTo, c.prefix+"."+token)
	msg.Header.Set(HeaderSchema, strconv.Itoa(actor.SchemaVersion))
	msg.Header.Set(HeaderRequestID, cmd.RequestID)
	if trace := TraceIDFrom(ctx); trace != "" {
		msg.Header.Set(HeaderTraceID, trace)
	}
	msg.Header.Set(HeaderContentType, "application/json")
	ack, err := c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(MsgID(cmd, fingerprint)), jetstream.WithExpectStream(StreamName))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if ack.Duplicate {
		// The first copy carries another reply subject; read its outcome.
		return c.awaitRecord(ctx, cmd, fingerprint)
	}
	select {
	case reply := <-ch:
		return reply, nil
	case <-ctx.Done():
		return nil, ErrPending
	}
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
