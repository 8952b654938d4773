package httpapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bookline/bookline/actor"
)

// TestCommitQueueTake: a batch takes the oldest waiting commits, at most
// commitBatchEntries of them and no more than commitBatchBytes (one at
// least), and every batch is a valid collective.commits within the
// command size limit; an empty queue stops its sender.
func TestCommitQueueTake(t *testing.T) {
	q := &commitQueue{token: actor.CommitsToken(0, 2), senders: 1}
	long := func(i int) actor.CommitEntry {
		ids := make([]string, actor.MaxMembers)
		for k := range ids {
			ids[k] = fmt.Sprintf("%02d%s", k, strings.Repeat("x", 62))
		}
		return actor.CommitEntry{CalendarID: ids[i%len(ids)], ID: actor.CollectiveID(ids, fmt.Sprint(i)), CalendarIDs: ids}
	}
	for i := range 200 {
		q.waiting = append(q.waiting, long(i))
	}
	next := 0
	for {
		batch := q.take()
		if batch == nil {
			break
		}
		if len(batch) > commitBatchEntries {
			t.Fatalf("batch of %d", len(batch))
		}
		for _, e := range batch {
			if e.ID != long(next).ID {
				t.Fatalf("entry %d out of order", next)
			}
			next++
		}
		cmd := actor.CommitsCommand(q.token, "collective.commits."+randomID(), batch, commitRecordTTLSeconds)
		if errs := cmd.Validate(); len(errs) > 0 {
			t.Fatalf("invalid batch: %v", errs)
		}
		if b, err := actor.MarshalCommand(cmd); err != nil || len(b) > actor.MaxCommandBytes {
			t.Fatalf("batch of %d entries: %d bytes, %v", len(batch), len(b), err)
		}
	}
	if next != 200 || q.senders != 0 {
		t.Fatalf("took %d of 200; %d senders still counted", next, q.senders)
	}
}
