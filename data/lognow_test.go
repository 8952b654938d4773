package data_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
)

func TestLogNow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := data.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	mustView(t, s, func(tx *data.Tx) error {
		if !tx.LogNow(0).IsZero() || !tx.LatestLogNow().IsZero() {
			t.Error("a new index has a log time")
		}
		return nil
	})
	t1 := time.Date(2026, 3, 2, 9, 0, 0, 123456789, time.UTC)
	mustCommit(t, s, func(tx *data.Tx) error {
		if err := tx.SetLogNow(0, t1); err != nil {
			return err
		}
		if err := tx.SetLogNow(1, t1.Add(time.Hour)); err != nil {
			return err
		}
		return tx.SetAppliedSeq(1, 5)
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = data.Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustView(t, s, func(tx *data.Tx) error {
		if got := tx.LogNow(0); !got.Equal(t1) || got.Location() != time.UTC {
			t.Errorf("LogNow(0) = %s", got)
		}
		if got := tx.LatestLogNow(); !got.Equal(t1.Add(time.Hour)) {
			t.Errorf("LatestLogNow = %s", got)
		}
		return nil
	})
	// A partition rebuilt from the start of the stream starts without one.
	mustCommit(t, s, func(tx *data.Tx) error {
		if err := tx.ResetPartition(1, func(string) bool { return false }); err != nil {
			return err
		}
		return tx.SetLogNow(0, time.Time{})
	})
	mustView(t, s, func(tx *data.Tx) error {
		if !tx.LogNow(1).IsZero() || !tx.LogNow(0).IsZero() || !tx.LatestLogNow().IsZero() {
			t.Errorf("log times after reset: %s %s", tx.LogNow(0), tx.LogNow(1))
		}
		return nil
	})
}
