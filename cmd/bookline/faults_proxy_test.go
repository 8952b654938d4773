package main

import (
	"net"
	"sync"
	"testing"
)

// linkMode is what a route proxy does with the bytes of its link.
type linkMode int

const (
	// linkPass forwards both ways.
	linkPass linkMode = iota
	// linkDrop closes every connection of the link and refuses new ones
	// (accepted, then closed at once): the peers see resets and dial
	// again, as after a crashed switch port.
	linkDrop
	// linkBlackhole forwards nothing and keeps the connections open:
	// what a peer sends stays in the socket buffers (TCP backpressure)
	// and arrives, intact, when the link heals, as with packets dropped
	// and retransmitted; a new connection is accepted and left silent
	// until the link heals, then closed. Only the peers' own timers
	// (NATS pings, Raft heartbeats) can tell that the link is gone.
	linkBlackhole
)

func (m linkMode) String() string {
	return [...]string{"pass", "drop", "blackhole"}[m]
}

// linkProxy is one directed route link between two NATS nodes: node i
// dials it as its route to node j, and it forwards to j's cluster port.
// Every route connection the pair opens in that direction goes through it
// (the nodes advertise no address of their own to gossip, see
// faultCluster), so a partition is a mode set on the proxies of a node's
// links.
type linkProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	mode  linkMode
	conns map[*linkConn]struct{}
	wg    sync.WaitGroup
}

// linkConn is one proxied connection: the accepted side and the side
// dialed to the target (nil while held in a blackhole).
type linkConn struct {
	in, out net.Conn
}

func (c *linkConn) close() {
	c.in.Close()
	if c.out != nil {
		c.out.Close()
	}
}

func startLinkProxy(t *testing.T, target string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, target: target, conns: map[*linkConn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *linkProxy) addr() string { return p.ln.Addr().String() }

func (p *linkProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(in)
	}
}

// serve forwards one accepted connection while the link lets it.
func (p *linkProxy) serve(in net.Conn) {
	defer p.wg.Done()
	c := &linkConn{in: in}
	p.mu.Lock()
	switch p.mode {
	case linkDrop:
		p.mu.Unlock()
		in.Close()
		return
	case linkBlackhole:
		// Held silent until the mode changes; then the peer dials again.
		p.conns[c] = struct{}{}
		for p.mode == linkBlackhole {
			p.cond.Wait()
		}
		delete(p.conns, c)
		p.mu.Unlock()
		in.Close()
		return
	}
	p.mu.Unlock()
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	if p.mode != linkPass {
		p.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	c.out = out
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, out, in) }()
	go func() { defer wg.Done(); p.pipe(c, in, out) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// pipe copies src to dst, holding each chunk while the link is a
// blackhole; it closes both ends when either fails or the link drops.
func (p *linkProxy) pipe(c *linkConn, dst, src net.Conn) {
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.mode == linkBlackhole {
				p.cond.Wait()
			}
			drop := p.mode == linkDrop
			p.mu.Unlock()
			if drop {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed end: the peers see the close
		}
	}
}

// set changes the link's mode; drop closes its connections at once.
func (p *linkProxy) set(m linkMode) {
	p.mu.Lock()
	p.mode = m
	var victims []*linkConn
	if m == linkDrop {
		for c := range p.conns {
			victims = append(victims, c)
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range victims {
		c.close()
	}
}

func (p *linkProxy) close() {
	p.ln.Close()
	p.set(linkDrop)
	p.wg.Wait()
}
