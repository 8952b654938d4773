package data_test

import (
	"path/filepath"
	"testing"

	"github.com/bookline/bookline/data"
)

// TestRulesLevelAndSkips: a partition's rules level and skipped commands
// are kept per partition, survive a reopen (they are in the file, and so in
// snapshots) and are forgotten with the rest of the partition by
// ResetPartition.
func TestRulesLevelAndSkips(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := data.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	mustView(t, s, func(tx *data.Tx) error {
		if got := tx.RulesLevel(0); got != 1 {
			t.Errorf("new index: level %d, want 1", got)
		}
		if _, ok := tx.SkippedBy(0, 5); ok {
			t.Error("new index: seq 5 skipped")
		}
		return nil
	})
	mustCommit(t, s, func(tx *data.Tx) error {
		for p := 0; p < 2; p++ {
			if err := tx.SetRulesLevel(p, 2); err != nil {
				return err
			}
			if err := tx.MarkSkipped(p, 5, 9); err != nil {
				return err
			}
		}
		return tx.MarkSkipped(0, 7, 11)
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = data.Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustView(t, s, func(tx *data.Tx) error {
		if got := tx.RulesLevel(1); got != 2 {
			t.Errorf("level %d, want 2", got)
		}
		if by, ok := tx.SkippedBy(0, 7); !ok || by != 11 {
			t.Errorf("seq 7 skipped by %d %v, want 11", by, ok)
		}
		return nil
	})
	mustCommit(t, s, func(tx *data.Tx) error { return tx.ResetPartition(0, func(string) bool { return false }) })
	mustView(t, s, func(tx *data.Tx) error {
		if got := tx.RulesLevel(0); got != 1 {
			t.Errorf("reset partition: level %d, want 1", got)
		}
		for _, seq := range []uint64{5, 7} {
			if _, ok := tx.SkippedBy(0, seq); ok {
				t.Errorf("reset partition: seq %d still skipped", seq)
			}
		}
		if by, ok := tx.SkippedBy(1, 5); !ok || by != 9 || tx.RulesLevel(1) != 2 {
			t.Errorf("the other partition lost its state: %d %v level %d", by, ok, tx.RulesLevel(1))
		}
		return nil
	})
}
