package data_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// visibleWithin reports, through a View, whether calendar id is visible,
// and whether the View returned within wait at all (a View waits for the
// conditions of the transactions it would see).
func visibleWithin(t *testing.T, s *data.Store, id string, wait time.Duration) (seen bool, returned bool) {
	t.Helper()
	res := make(chan bool, 1)
	go func() {
		_ = s.View(func(tx *data.Tx) error {
			res <- tx.CalendarExists(id)
			return nil
		})
	}()
	select {
	case seen = <-res:
		return seen, true
	case <-time.After(wait):
		return false, false
	}
}

// TestCommitDurableAnswersAfterItsCondition: the commit loop goes on while a
// group waits for its condition; the caller is answered, and readers see
// the transaction, only once the condition returned; a later group is
// answered after it, in commit order.
func TestCommitDurableAnswersAfterItsCondition(t *testing.T) {
	s := datatest.MustOpen(t)
	release := make(chan struct{})
	conditionCalled := make(chan struct{})
	resA := make(chan error, 1)
	go func() {
		resA <- s.CommitDurable(func() error {
			close(conditionCalled)
			<-release
			return nil
		}, func(tx *data.Tx) error { return tx.PutCalendar(data.Calendar{ID: "a"}) })
	}()
	<-conditionCalled

	// B has no condition of its own: its function runs and commits while
	// A waits, but it is answered after A.
	ranB := make(chan struct{})
	resB := make(chan error, 1)
	go func() {
		resB <- s.Commit(func(tx *data.Tx) error {
			if !tx.CalendarExists("a") {
				return errors.New("B does not see A's write")
			}
			close(ranB)
			return tx.PutCalendar(data.Calendar{ID: "b"})
		})
	}()
	select {
	case <-ranB:
	case <-time.After(10 * time.Second):
		t.Fatal("the commit loop did not run B while A waited for its condition")
	}
	checkFor(t, 10*time.Second, time.Millisecond, func() error {
		if c := s.Stats().Commits; c < 2 {
			return fmt.Errorf("%d commits, want B's committed too", c)
		}
		return nil
	})
	select {
	case err := <-resA:
		t.Fatalf("A answered before its condition returned: %v", err)
	case err := <-resB:
		t.Fatalf("B answered before A: %v", err)
	default:
	}
	if _, returned := visibleWithin(t, s, "a", 50*time.Millisecond); returned {
		t.Fatal("a reader saw the index while the newest transaction waited for its condition")
	}
	// ViewIfVisible neither waits nor runs its function meanwhile.
	ran, err := s.ViewIfVisible(func(*data.Tx) error {
		t.Error("ViewIfVisible ran while the newest transaction waited for its condition")
		return nil
	})
	if ran || err != nil {
		t.Errorf("ViewIfVisible = %v, %v; want false, nil", ran, err)
	}

	close(release)
	if err := <-resA; err != nil {
		t.Fatalf("A: %v", err)
	}
	if err := <-resB; err != nil {
		t.Fatalf("B: %v", err)
	}
	for _, id := range []string{"a", "b"} {
		if seen, returned := visibleWithin(t, s, id, 10*time.Second); !returned || !seen {
			t.Errorf("%s not visible after its condition returned (returned %v)", id, returned)
		}
	}
	seen := false
	if ran, err := s.ViewIfVisible(func(tx *data.Tx) error { seen = tx.CalendarExists("b"); return nil }); !ran || err != nil || !seen {
		t.Errorf("ViewIfVisible after the answers = ran %v, err %v, saw b %v; want true, nil, true", ran, err, seen)
	}
}

// TestCommitDurableFailureStopsReaders: a failed condition fails its
// caller, every later commit and every View of the newer state: the
// transaction is in the file but must never be read.
func TestCommitDurableFailureStopsReaders(t *testing.T) {
	// Not datatest.MustOpen: its invariant check at the end could not read
	// the index either.
	s, err := data.Open(filepath.Join(t.TempDir(), "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustCommit(t, s, func(tx *data.Tx) error { return tx.PutCalendar(data.Calendar{ID: "before"}) })
	boom := errors.New("fsync: input/output error")
	err = s.CommitDurable(func() error { return boom }, func(tx *data.Tx) error {
		return tx.PutCalendar(data.Calendar{ID: "lost"})
	})
	if !errors.Is(err, boom) {
		t.Fatalf("CommitDurable = %v, want %v", err, boom)
	}
	if err := s.Commit(func(tx *data.Tx) error { return tx.PutCalendar(data.Calendar{ID: "later"}) }); !errors.Is(err, boom) {
		t.Errorf("a later Commit = %v, want %v", err, boom)
	}
	if err := s.View(func(*data.Tx) error { return nil }); !errors.Is(err, boom) {
		t.Errorf("View = %v, want %v", err, boom)
	}
}

// TestCommitDurableAsyncKeepsOrder: functions queued one after another
// without waiting are applied in that order, and a function that checks its
// predecessor sees it applied.
func TestCommitDurableAsyncKeepsOrder(t *testing.T) {
	s := datatest.MustOpen(t)
	release := make(chan struct{})
	var answers []<-chan error
	var order []int
	for i := range 5 {
		cond := func() error { return nil }
		if i == 0 {
			cond = func() error { <-release; return nil }
		}
		answers = append(answers, s.CommitDurableAsync(cond, func(tx *data.Tx) error {
			if i > 0 && tx.AppliedSeq(0) != uint64(i) {
				return fmt.Errorf("function %d ran on applied seq %d", i, tx.AppliedSeq(0))
			}
			order = append(order, i)
			return tx.SetAppliedSeq(0, uint64(i+1))
		}))
	}
	close(release)
	for i, a := range answers {
		if err := s.Await(a); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	if !slices.Equal(order, []int{0, 1, 2, 3, 4}) {
		t.Errorf("applied in order %v", order)
	}
	mustView(t, s, func(tx *data.Tx) error {
		if got := tx.AppliedSeq(0); got != 5 {
			t.Errorf("applied seq %d, want 5", got)
		}
		return nil
	})
}
