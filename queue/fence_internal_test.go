package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bookline/bookline/queue/queuetest"
)

// TestFenceCalendar: the ownership epoch of a partition. The instance that
// pulls it claims the epoch and makes its first call only one takeover
// timeout later; each call's deadline is at most a window after the last
// renewal; outside cluster mode there is no bound; once another instance
// claimed the epoch, the renewal fails and no call may be made until this
// instance claims again.
func TestFenceCalendar(t *testing.T) {
	const ttl = 2 * time.Second
	url := queuetest.StartServer(t)
	n, err := StartNode(NodeConfig{DataDir: t.TempDir(), NATSURL: url, InstanceID: "solo", Partitions: 2,
		Replicas: 1, AllowLazySync: true, // not about the servers' durability
		TakeoverTimeout: ttl, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	const cal = "fenced"
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if !n.OwnsCalendar(cal) {
			return fmt.Errorf("not pulling the partition yet")
		}
		return nil
	})
	ctx := context.Background()
	start := time.Now()
	until, err := n.FenceCalendar(ctx, cal)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < ttl {
		t.Fatalf("first call allowed %s after the claim, want at least the takeover timeout %s", waited, ttl)
	}
	if left := time.Until(until); left <= 0 || left > ttl {
		t.Fatalf("deadline %s ahead, want within (0, %s]", left, ttl)
	}
	// Within a quarter window the renewal is not repeated: the same bound.
	again, err := n.FenceCalendar(ctx, cal)
	if err != nil || !again.Equal(until) {
		t.Fatalf("second call: %v %v, want %v", again, err, until)
	}
	// Another instance claims the partition.
	p := PartitionOf(cal, len(n.Parts()))
	val, _ := json.Marshal(ownClaim{Instance: "other"})
	if _, err := n.progress.kv.Put(ctx, n.progress.ownKey(p), val); err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, 5*time.Second, func() error {
		_, err := n.FenceCalendar(ctx, cal)
		if !errors.Is(err, ErrNotOwner) {
			return fmt.Errorf("after another claim: %v, want ErrNotOwner", err)
		}
		return nil
	})
	// It may claim again (the map gives it the partition), waiting once more.
	start = time.Now()
	if _, err := n.FenceCalendar(ctx, cal); err != nil || time.Since(start) < ttl {
		t.Fatalf("claim again: %v after %s", err, time.Since(start))
	}
	e, err := n.progress.kv.Get(ctx, n.progress.ownKey(p))
	if err != nil {
		t.Fatal(err)
	}
	var owner ownClaim
	if err := json.Unmarshal(e.Value(), &owner); err != nil || owner.Instance != "solo" {
		t.Fatalf("epoch key %s: %+v %v", e.Value(), owner, err)
	}
	// Another partition's calendar this instance does not pull: refused.
	n.Parts()[1-p].active.Store(false)
	other := "x"
	for PartitionOf(other, 2) == p {
		other += "x"
	}
	if _, err := n.FenceCalendar(ctx, other); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("a calendar of a partition not pulled here: %v", err)
	}
}
