package queuetest

import (
	"bytes"
	"strconv"
	"sync"
	"testing"
	"time"
)

// CheckFor polls fn until it returns nil, backing off from 1 ms to 100 ms,
// and fails tb with fn's last error when timeout passes. Tests wait with it
// instead of sleeping.
func CheckFor(tb testing.TB, timeout time.Duration, fn func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met after %s: %v", timeout, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// SyncBuffer is a log sink safe for concurrent writers.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Apart returns n calendar ids (prefix0, prefix1, …) that partitionOf
// (queue.PartitionOf, which this package cannot import) puts in n
// distinct partitions of parts: the members of a collective whose steps
// are decided by different writers.
func Apart(tb testing.TB, partitionOf func(string, int) int, prefix string, parts, n int) []string {
	tb.Helper()
	seen := map[int]bool{}
	var ids []string
	for i := 0; len(ids) < n && i < 1000; i++ {
		id := prefix + strconv.Itoa(i)
		if p := partitionOf(id, parts); !seen[p] {
			seen[p] = true
			ids = append(ids, id)
		}
	}
	if len(ids) < n {
		tb.Fatalf("no %d calendars in distinct partitions of %d", n, parts)
	}
	return ids
}
