package queue

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// decideChunk decides a replay chunk (its commands by partition), keeping
// its tree writes in kept, which FlushPending has emptied. The partitions
// are split into deciders groups of about the same number of commands, and
// each group is decided on a goroutine of its own in a data.Fork, which
// reads the index as the previous chunk left it: a partition's decisions
// read and write only its own calendars and per-partition keys, so no
// group needs another's writes. Only the merge of the forks into one
// transaction, bbolt's single writer, is serial. The decisions are the
// live writers': each partition's commands are applied in order, against
// its own state, however the partitions are grouped.
//
// One decider decides in a fork too. A fork keeps the chunk's writes in
// memory and the merge puts only their net result into bbolt: a chunk
// that lists request expiry entries and prunes them again (short-lived
// records) leaves nothing of them, where a write transaction deletes each
// from a leaf that grows all transaction long (the 10.31M-command stream
// of the recovery benchmark: 314 s in one write transaction per chunk,
// 157 s in one fork, docs/benchmarks.md).
func decideChunk(store *data.Store, kept *data.Pending, chunk [][]actor.Decoded, deciders int) error {
	groups := partitionGroups(chunk, deciders)
	if len(groups[0]) == 0 {
		return nil // no commands
	}
	forks := make([]*data.Fork, 0, len(groups))
	defer func() {
		for _, f := range forks {
			f.Discard()
		}
	}()
	for range groups {
		f, err := store.Fork()
		if err != nil {
			return err
		}
		forks = append(forks, f)
	}
	// failed[i] is group i's first failing partition and its error: the
	// error of the lowest such partition is returned, as deciding them in
	// partition order would.
	type failure struct {
		p   int
		err error
	}
	failed := make([]failure, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, p := range g {
				if err := applyReplayPartition(forks[i].Tx(), p, chunk[p]); err != nil {
					failed[i] = failure{p, err}
					return
				}
			}
		}()
	}
	wg.Wait()
	var first *failure
	for i := range failed {
		if f := &failed[i]; f.err != nil && (first == nil || f.p < first.p) {
			first = f
		}
	}
	if first != nil {
		return first.err
	}
	return store.CommitForks(kept, forks)
}

// applyReplayPartition applies partition p's commands of a chunk in tx.
func applyReplayPartition(tx *data.Tx, p int, batch []actor.Decoded) error {
	if len(batch) == 0 {
		return nil
	}
	out, err := actor.ApplyReplay(tx, p, batch)
	if err != nil {
		return err
	}
	if err := actor.Held(out, batch); err != nil {
		// Only a build that knows the command's schema can replay the
		// stream past it.
		return fmt.Errorf("queue: replay partition %d: %w", p, err)
	}
	return nil
}

// partitionGroups splits the partitions that have commands in chunk into
// at most n groups of about the same number of commands (the largest
// partition first into the smallest group), each group's partitions in
// ascending order. Fewer than two partitions with commands, or n < 2,
// give one group (empty when no partition has commands).
func partitionGroups(chunk [][]actor.Decoded, n int) [][]int {
	var parts []int
	for p, batch := range chunk {
		if len(batch) > 0 {
			parts = append(parts, p)
		}
	}
	if n < 2 || len(parts) < 2 {
		return [][]int{parts}
	}
	n = min(n, len(parts))
	slices.SortStableFunc(parts, func(a, b int) int { return cmp.Compare(len(chunk[b]), len(chunk[a])) })
	groups := make([][]int, n)
	load := make([]int, n)
	for _, p := range parts {
		i := 0
		for j := range load {
			if load[j] < load[i] {
				i = j
			}
		}
		groups[i] = append(groups[i], p)
		load[i] += len(chunk[p])
	}
	for _, g := range groups {
		slices.Sort(g)
	}
	return groups
}
