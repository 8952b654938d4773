package queue

import "errors"

// Close stops the writers (each finishes the batch it is applying: commit,
// reply, ack), then closes the client, the index and NATS. Calls after the
// first return its result.
func (n *Node) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.close() })
	return n.closeErr
}

func (n *Node) close() error {
	if n.watch != nil {
		n.watch.close()
	}
	n.StopWriters()
	var errs []error
	if n.client != nil {
		errs = append(errs, n.client.Close())
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	// After the store: its last commit may still wait for a sync.
	for _, l := range []*logSync{n.cmdSync, n.evtSync, n.snapSync} {
		if l != nil {
			l.Close()
		}
	}
	if n.nc != nil {
		n.nc.Close()
	}
	if n.ns != nil {
		n.ns.Shutdown()
		n.ns.WaitForShutdown()
	}
	return errors.Join(errs...)
}
