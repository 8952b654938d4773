package httpapi

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/bookline/bookline/actor"
)

// The commits of vote-decided collective bookings, gathered per partition.
//
// A collective booking is answered once every member voted yes; the
// commits that follow only apply that decision, and each commit of its
// own is a command of the log (publish, store, decide, reply), which is
// what bounds throughput under load. So the API queues each member's
// commit with the partition of its calendar, and a sender per partition
// publishes what has gathered as one collective.commits: at once when
// nothing is in flight, and meanwhile the next batch gathers, so batches
// grow with the load and an idle API adds no delay. A full batch waiting
// starts another sender (up to commitSenders), so that a backlog drains
// instead of growing.
//
// A commit that is not applied (the queue is full, the batch's answer is
// lost, the instance stops) leaves its part pending; the partition's
// owner resolves it after NodeConfig.CollectiveResolveAfter with the
// same votes, so it is committed all the same, later.

// PartitionCounter tells the command stream's partition count
// (queue.Node.PartitionCount).
type PartitionCounter interface {
	PartitionCount() int
}

// Limits of the commit batches.
const (
	// commitBatchEntries bounds the entries of one collective.commits
	// (actor.MaxCommitEntries is the protocol's bound).
	commitBatchEntries = 128
	// commitSenders bounds the batches of a partition in flight at once.
	// One is enough while the commits keep up; a second and more start
	// only when a full batch is waiting, so that a backlog (a slow log
	// round under heavy load) drains instead of growing: one sender
	// carries at most commitBatchEntries per round trip.
	commitSenders = 4
	// commitBatchBytes bounds a batch's entries' size, well below
	// actor.MaxCommandBytes whatever the calendar ids' lengths.
	commitBatchBytes = 32 << 10
	// commitQueueEntries bounds the commits waiting per partition: past
	// it the parts are left to the resolver.
	commitQueueEntries = 16384
	// commitRecordTTLSeconds is how long a batch's request record is
	// kept: nothing asks for it but a redelivery of the batch itself.
	commitRecordTTLSeconds = 24 * 3600
)

// commitBatcher holds one commit queue per partition.
type commitBatcher struct {
	s      *Server
	n      int
	queues []*commitQueue
}

// commitQueue is one partition's waiting commits and its senders.
type commitQueue struct {
	b     *commitBatcher
	token string // actor.CommitsToken of the partition

	mu      sync.Mutex
	waiting []actor.CommitEntry
	senders int // sender goroutines running
}

// newCommitBatcher is nil when the partition count is not known (no
// port): every commit is then a command of its own.
func newCommitBatcher(s *Server, pc PartitionCounter) *commitBatcher {
	if pc == nil {
		return nil
	}
	n := pc.PartitionCount()
	if n <= 0 {
		return nil
	}
	b := &commitBatcher{s: s, n: n, queues: make([]*commitQueue, n)}
	for p := range b.queues {
		b.queues[p] = &commitQueue{b: b, token: actor.CommitsToken(p, n)}
	}
	return b
}

// add queues the commit of collective id on each of its calendars ids.
func (b *commitBatcher) add(id string, ids []string) {
	for _, cal := range ids {
		q := b.queues[actor.PartitionOf(cal, b.n)]
		if !q.add(actor.CommitEntry{CalendarID: cal, ID: id, CalendarIDs: ids}) {
			b.s.log.Warn("the commit queue of a partition is full: a collective booking's part stays pending until its owner resolves it",
				"id", id, "calendar", cal)
		}
	}
}

// add queues e, starting the sender if none runs; false when the queue is
// full.
func (q *commitQueue) add(e actor.CommitEntry) bool {
	q.mu.Lock()
	if len(q.waiting) >= commitQueueEntries {
		q.mu.Unlock()
		return false
	}
	q.waiting = append(q.waiting, e)
	start := q.senders == 0 || len(q.waiting) >= commitBatchEntries && q.senders < commitSenders
	if start {
		q.senders++
	}
	q.mu.Unlock()
	if start {
		go q.run()
	}
	return true
}

// run sends batches, one at a time, until nothing is waiting.
func (q *commitQueue) run() {
	for {
		batch := q.take()
		if batch == nil {
			return
		}
		q.send(batch)
	}
}

// take removes the next batch from the queue: up to commitBatchEntries
// entries and commitBatchBytes; nil (and the sender stops) when empty.
func (q *commitQueue) take() []actor.CommitEntry {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.senders--
		return nil
	}
	n, size := 0, 0
	for n < len(q.waiting) && n < commitBatchEntries {
		size += entrySize(&q.waiting[n])
		if n > 0 && size > commitBatchBytes {
			break
		}
		n++
	}
	batch := make([]actor.CommitEntry, n)
	copy(batch, q.waiting)
	rest := copy(q.waiting, q.waiting[n:])
	clear(q.waiting[rest:])
	q.waiting = q.waiting[:rest]
	return batch
}

// entrySize is about the bytes of e in a command's JSON.
func entrySize(e *actor.CommitEntry) int {
	n := 48 + len(e.CalendarID) + len(e.ID)
	for _, id := range e.CalendarIDs {
		n += len(id) + 3
	}
	return n
}

// send publishes one batch and waits for its answer. A failure is logged:
// its parts stay pending until their owners resolve them.
func (q *commitQueue) send(batch []actor.CommitEntry) {
	s := q.b.s
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReplyTimeout)
	defer cancel()
	cmd := actor.CommitsCommand(q.token, "collective.commits."+randomID(), batch, commitRecordTTLSeconds)
	if errs := cmd.Validate(); len(errs) > 0 {
		s.log.Error("a batch of collective commits is invalid: its parts stay pending until their owners resolve them",
			"token", q.token, "entries", len(batch), "errors", errs)
		return
	}
	raw, err := s.backend.Submit(ctx, cmd, cmd.Fingerprint())
	var r actor.Reply
	if err == nil {
		err = json.Unmarshal(raw, &r)
	}
	switch {
	case err != nil:
		s.log.Warn("a batch of collective commits was not answered: parts not committed stay pending until their owners resolve them",
			"token", q.token, "entries", len(batch), "err", err)
	case r.Outcome != actor.OutcomeAccepted:
		s.log.Error("a batch of collective commits was refused: its parts stay pending until their owners resolve them",
			"token", q.token, "entries", len(batch), "code", r.Code, "message", r.Message)
	case len(r.Details) > 0:
		s.log.Warn("parts of a batch of collective commits were not committed", "token", q.token, "message", r.Message,
			"details", r.Details)
	}
}
