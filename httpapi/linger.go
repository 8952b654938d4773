package httpapi

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Lingering close, as nginx's lingering_close does it. A server that closes
// a socket while the client's data is still unread makes the kernel send a
// reset, and a client still uploading a body that was refused (413
// payload_too_large, 408 on a read timeout) then sees "connection reset"
// instead of the JSON answer already written: with a 1 MiB body two clients
// in three did. Closing the write side first delivers the answer; reading
// and discarding what the client still sends, for a bounded time and size,
// lets it finish writing and read the answer before the socket goes away.
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 8 << 20
	// lingerSlots bounds the sockets kept open after fasthttp let go of
	// them, so clients that never stop sending cannot hold more than this
	// many descriptors; past it a close is immediate, as without lingering.
	lingerSlots = 1024
)

// LingerListener wraps ln so that every TCP connection it accepts closes
// with a lingering close.
func LingerListener(ln net.Listener) net.Listener {
	return &lingerListener{Listener: ln, slots: make(chan struct{}, lingerSlots), time: lingerTime, bytes: lingerBytes}
}

type lingerListener struct {
	net.Listener
	slots chan struct{}
	time  time.Duration
	bytes int64
}

func (l *lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	return &lingerConn{TCPConn: tc, l: l}, nil
}

type lingerConn struct {
	*net.TCPConn
	l *lingerListener
	// reading counts the owner's Reads in progress, and closed is set by
	// Close: a Close while the owner is blocked in a Read comes from
	// another goroutine (fasthttp closing idle connections at shutdown),
	// and closes at once, as a plain socket would, so the Read returns.
	reading atomic.Int32
	closed  atomic.Bool
	once    sync.Once
	err     error
}

// Read is the socket's, until Close.
func (c *lingerConn) Read(b []byte) (int, error) {
	c.reading.Add(1) // before the check: Close sees either the count or the check sees closed
	defer c.reading.Add(-1)
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.TCPConn.Read(b)
}

// Write is the socket's, until Close.
func (c *lingerConn) Write(b []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.TCPConn.Write(b)
}

// The deadlines are the owner's until Close, then the lingering
// goroutine's: after Close they change nothing, without an error
// (fasthttp takes an error setting one for a bug, and panics).
func (c *lingerConn) SetDeadline(t time.Time) error {
	if c.closed.Load() {
		return nil
	}
	return c.TCPConn.SetDeadline(t)
}

func (c *lingerConn) SetReadDeadline(t time.Time) error {
	if c.closed.Load() {
		return nil
	}
	return c.TCPConn.SetReadDeadline(t)
}

func (c *lingerConn) SetWriteDeadline(t time.Time) error {
	if c.closed.Load() {
		return nil
	}
	return c.TCPConn.SetWriteDeadline(t)
}

// Close returns once the answer is handed to the kernel; the socket itself
// closes in the background when the client has stopped sending, after
// lingerTime or after lingerBytes, whichever comes first.
func (c *lingerConn) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		if c.reading.Load() > 0 {
			c.err = c.TCPConn.Close()
			return
		}
		select {
		case c.l.slots <- struct{}{}:
		default:
			c.err = c.TCPConn.Close()
			return
		}
		if err := c.TCPConn.CloseWrite(); err != nil {
			<-c.l.slots
			c.err = c.TCPConn.Close()
			return
		}
		go func() {
			defer func() { <-c.l.slots }()
			_ = c.TCPConn.SetReadDeadline(time.Now().Add(c.l.time))
			_, _ = io.CopyN(io.Discard, c.TCPConn, c.l.bytes)
			_ = c.TCPConn.Close()
		}()
	})
	return c.err
}
