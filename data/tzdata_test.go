package data_test

import (
	"testing"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

func TestNoteTzdata(t *testing.T) {
	note := func(s *data.Store, v string) string {
		t.Helper()
		var got string
		mustCommit(t, s, func(tx *data.Tx) (err error) { got, err = tx.NoteTzdata(v); return err })
		return got
	}
	s := datatest.MustOpen(t)
	for _, c := range []struct{ note, want string }{
		{"2025a", "2025a"}, // a new index
		{"2025a", "2025a"},
		{"2025c", "2025a,2025c"},
		{"2025c", "2025a,2025c"},
		{"2025a", "2025a,2025c,2025a"}, // back to an older build: it counts again
	} {
		if got := note(s, c.note); got != c.want {
			t.Fatalf("NoteTzdata(%s) = %q, want %q", c.note, got, c.want)
		}
	}
	// An index with decisions from before releases were recorded.
	old := datatest.MustOpen(t)
	mustCommit(t, old, func(tx *data.Tx) error { return tx.SetAppliedSeq(0, 7) })
	if got := note(old, "2025c"); got != data.TzdataUnknown+",2025c" {
		t.Fatalf("index without a record: %q", got)
	}
}

// TestDigestCoversTzdata: the digest says, and its total depends on, which
// time zone data decided the index; an index without any record keeps the
// total it had before releases were recorded.
func TestDigestCoversTzdata(t *testing.T) {
	digest := func(s *data.Store) data.Digest {
		t.Helper()
		var d data.Digest
		mustView(t, s, func(tx *data.Tx) (err error) { d, err = tx.Digest(); return err })
		return d
	}
	a, b := datatest.MustOpen(t), datatest.MustOpen(t)
	for _, s := range []*data.Store{a, b} {
		mustCommit(t, s, func(tx *data.Tx) error { return tx.SetAppliedSeq(0, 3) })
	}
	if da, db := digest(a), digest(b); da.Total != db.Total || da.Tzdata != "" {
		t.Fatalf("equal indexes: %+v %+v", da, db)
	}
	mustCommit(t, a, func(tx *data.Tx) error { _, err := tx.NoteTzdata("2025c"); return err })
	da, db := digest(a), digest(b)
	if da.Tzdata != data.TzdataUnknown+",2025c" || da.Total == db.Total {
		t.Fatalf("tzdata not in the digest: %+v vs %+v", da, db)
	}
	if cal, differs := data.FirstDifference(da, db); !differs || cal != "" {
		t.Fatalf("FirstDifference = %q, %v", cal, differs)
	}
}
