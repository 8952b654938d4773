package calendarsync_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bookline/bookline/calendarsync/googletest"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestClusterMirrorFencedAcrossTakeover: two instances on three NATS nodes
// (R3). The owner of a calendar's partition has its patch of a reschedule
// held in flight on the way to Google when it is cut off from NATS (it
// keeps believing it owns the partition). The other instance takes the
// partition over, mirrors that reschedule and a second one; then the held
// call is passed on to Google (as Google may apply a request whose client
// gave up). The old owner's call in flight ended before the new owner's
// first call, it makes no call after that, and Google keeps the state the
// log says: the second reschedule. Without the ownership epoch the old
// owner's call outlives the new owner's first, and its retry (a 412, a
// fresh read, a patch) brings the first reschedule back.
func TestClusterMirrorFencedAcrossTakeover(t *testing.T) {
	t.Parallel()
	fake := googletest.New(t)
	const g = "fenced@group.calendar.google.com"
	fake.AddCalendar(g)
	c := queuetest.StartCluster(t, 3)
	urls := c.URLs()
	var mu sync.Mutex
	var calls []googleCall
	lines := map[string]*googleLine{}
	var nodes []node
	closed := map[string]bool{}
	for _, id := range []string{"f0", "f1"} {
		lines[id] = newGoogleLine(t, fake, id, &mu, &calls)
		gc := fastRetries(lines[id].service)
		// A call held on its way stays in flight as long as the fence
		// lets it (2s, the takeover timeout), not cut short by this.
		gc.CallTimeout = 5 * time.Second
		n := startClusterNodeWith(t, urls, id, gc, true)
		t.Cleanup(func() {
			if !closed[id] {
				_ = n.Close()
			}
		})
		nodes = append(nodes, n)
	}
	const cal = "fenced"
	p := queue.PartitionOf(cal, 4)
	var owner, heir node
	queuetest.CheckFor(t, 30*time.Second, func() error {
		owner, heir = node{}, node{}
		for _, n := range nodes {
			st, _, err := n.ClusterStatus(context.Background())
			if err != nil {
				return err
			}
			if len(st.Members) != 2 {
				return fmt.Errorf("%s sees members %v", st.Instance, st.Members)
			}
			if slices.Contains(st.Consuming, p) {
				owner = n
			} else {
				heir = n
			}
		}
		if owner.Node == nil || heir.Node == nil {
			return fmt.Errorf("partition %d pulled by both or neither", p)
		}
		return nil
	})
	ownerID, heirID := owner.InstanceID(), heir.InstanceID()
	t.Logf("%s owns partition %d", ownerID, p)
	link(t, heir, cal, g, false)
	s, e := slot(0)
	bk := book(t, owner, cal, s, e).Booking.ID
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if _, ok := fake.Events(g)[bk]; !ok || pending(t, owner, cal) != 0 {
			return fmt.Errorf("not mirrored yet")
		}
		return nil
	})

	// The owner's calls from now on are held on their way.
	line := lines[ownerID]
	line.holding.Store(true)
	reschedule(t, owner, cal, bk, 5)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if h := line.heldCalls(); len(h) == 0 || h[0].method != http.MethodPatch {
			return fmt.Errorf("held calls %v", h)
		}
		return nil
	})
	cutAt := time.Now()
	owner.Node.Conn().Close() // cut off from NATS: it still believes it owns the partition
	t.Logf("%s cut off from NATS with its patch in flight", ownerID)

	queuetest.CheckFor(t, 30*time.Second, func() error {
		if !heir.OwnsCalendar(cal) {
			return fmt.Errorf("%s does not own the partition yet", heirID)
		}
		return nil
	})
	reschedule(t, heir, cal, bk, 9)
	queuetest.CheckFor(t, 30*time.Second, func() error {
		ev := fake.Events(g)[bk]
		st, en, _ := googletest.Interval(&ev)
		ws, we := slot(9)
		if pending(t, heir, cal) != 0 || !st.Equal(ws) || !en.Equal(we) {
			return fmt.Errorf("%d queued on %s, event at [%s, %s)", pending(t, heir, cal), heirID, st, en)
		}
		return nil
	})
	var heirFirst time.Time
	mu.Lock()
	for _, c := range calls {
		if c.instance == heirID && strings.Contains(c.path, "/events/"+bk) && c.at.After(cutAt) {
			heirFirst = c.at
			break
		}
	}
	mu.Unlock()
	t.Logf("%s's first call for the event %s after the cut", heirID, heirFirst.Sub(cutAt).Round(time.Millisecond))

	// Google gets the held calls now, long after their clients gave up.
	releasedAt := time.Now()
	line.holding.Store(false)
	close(line.release)
	line.late.Wait()
	for _, h := range line.heldCalls() {
		if !h.gaveUp.IsZero() {
			t.Logf("%s's held %s ended %s after the cut, answered %d when passed on", ownerID, h.method, h.gaveUp.Sub(cutAt).Round(time.Millisecond), h.status)
		}
		switch {
		case h.gaveUp.IsZero():
			t.Errorf("%s's %s %s still waited when Google answered it (%d)", ownerID, h.method, h.path, h.status)
		case !h.gaveUp.Before(heirFirst):
			t.Errorf("%s's %s %s ran until %s after the cut, past %s's first call at %s",
				ownerID, h.method, h.path, h.gaveUp.Sub(cutAt).Round(time.Millisecond), heirID, heirFirst.Sub(cutAt).Round(time.Millisecond))
		}
		if h.status/100 == 2 {
			t.Errorf("%s's late %s %s was applied (%d)", ownerID, h.method, h.path, h.status)
		}
	}
	// An observation window in which the old owner's retries (20ms
	// apart) would show: only the held calls reach Google, once.
	var later []string
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && len(later) == 0; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		for _, c := range calls {
			if c.instance == ownerID && c.at.After(releasedAt.Add(time.Second)) {
				later = append(later, c.method+" "+c.path)
			}
		}
		mu.Unlock()
	}
	if len(later) > 0 {
		t.Errorf("%s, cut off from NATS, called Google after the takeover: %v", ownerID, later)
	}
	queuetest.CheckFor(t, 5*time.Second, func() error {
		if ev := fake.Events(g)[bk]; ev.Status != "confirmed" {
			return fmt.Errorf("event %s", ev.Status)
		}
		return nil
	})
	eventAt(t, fake, g, bk, 9)
	compareMirror(t, heir, fake, cal, g)
	closed[ownerID] = true
	_ = owner.Close()
	closed[heirID] = true
	stopNode(t, heir)
}
