package httpapi

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// lingerPair accepts one connection through l and returns the server's end
// and the client's.
func lingerPair(t *testing.T, l *lingerListener) (net.Conn, net.Conn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return <-accepted, client
}

func newLingerListener(t *testing.T, slots int, d time.Duration, n int64) *lingerListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return &lingerListener{Listener: ln, slots: make(chan struct{}, slots), time: d, bytes: n}
}

// writeUntilRefused writes to c until the peer has closed for good, and
// fails the test when it has not by the deadline.
func writeUntilRefused(t *testing.T, c net.Conn, within time.Duration) {
	t.Helper()
	chunk := make([]byte, 16<<10)
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		_ = c.SetWriteDeadline(deadline)
		if _, err := c.Write(chunk); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			return
		}
	}
	t.Fatalf("the server still accepted data after %v", within)
}

func TestLingerDeliversAnswerThenCloses(t *testing.T) {
	l := newLingerListener(t, 4, 200*time.Millisecond, 1<<30)
	srv, client := lingerPair(t, l)
	if _, err := srv.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	// The client still sends after the server closed: no reset yet, and the
	// answer is there, followed by the end of the stream.
	if _, err := client.Write(make([]byte, 64<<10)); err != nil {
		t.Fatalf("write while the server lingers: %v", err)
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(client)
	if err != nil || string(got) != "answer" {
		t.Fatalf("read %q, %v", got, err)
	}
	// Bounded in time: a client that never stops sending is cut off.
	writeUntilRefused(t, client, 10*time.Second)
}

func TestLingerBoundedInBytes(t *testing.T) {
	l := newLingerListener(t, 4, time.Hour, 256<<10)
	srv, client := lingerPair(t, l)
	_ = srv.Close()
	writeUntilRefused(t, client, 10*time.Second)
}

func TestLingerSlotsBounded(t *testing.T) {
	l := newLingerListener(t, 1, time.Hour, 1<<30)
	srv1, client1 := lingerPair(t, l)
	srv2, client2 := lingerPair(t, l)
	_ = srv1.Close() // takes the only slot
	_ = srv2.Close() // closes at once
	if len(l.slots) != 1 {
		t.Fatalf("%d slots in use, want 1", len(l.slots))
	}
	writeUntilRefused(t, client2, 10*time.Second)
	if _, err := client1.Write(make([]byte, 1024)); err != nil {
		t.Fatalf("the lingering connection refused data: %v", err)
	}
	_ = srv1.(*lingerConn).TCPConn.Close()
}

// TestLingerCloseWhileReading: a Close while the owner is blocked reading
// (fasthttp closing idle connections at shutdown) closes at once and ends
// the Read; after Close the deadlines change nothing and report no error,
// and Read and Write fail.
func TestLingerCloseWhileReading(t *testing.T) {
	l := newLingerListener(t, 4, time.Hour, 1<<30)
	srv, client := lingerPair(t, l)
	done := make(chan error, 1)
	go func() {
		_, err := srv.Read(make([]byte, 16))
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for srv.(*lingerConn).reading.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the read did not start")
		}
		time.Sleep(time.Millisecond)
	}
	_ = srv.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the read returned without an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the read")
	}
	if len(l.slots) != 0 {
		t.Fatalf("a connection closed while read lingers")
	}
	if err := srv.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatalf("SetWriteDeadline after Close: %v", err)
	}
	if _, err := srv.Write([]byte("x")); err == nil {
		t.Fatal("Write after Close succeeded")
	}
	writeUntilRefused(t, client, 10*time.Second)
}
