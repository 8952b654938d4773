package queuetest

import (
	"errors"
	"net"
	"testing"
)

// TestStartClusterNoticesATakenPort: a cluster port that another process
// took after freePorts released it is reported as such at once (and
// StartCluster then tries other ports), not as a server that never became
// ready.
func TestStartClusterNoticesATakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ports := append(FreePorts(t, 2), ln.Addr().(*net.TCPAddr).Port)
	c, err := startCluster(t, ports, ClusterOptions{})
	c.Shutdown()
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("a taken cluster port: %v", err)
	}
	if c := StartCluster(t, 3); len(c.Servers) != 3 {
		t.Fatalf("%d servers", len(c.Servers))
	}
}
