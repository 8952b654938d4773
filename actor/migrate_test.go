package actor_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// testdata/index-schema4.db.gz is the index the previous layout (schema
// 4, at fdfb68a) built from genLog(77, 1200) applied in one batch. Its
// migration must hold exactly the state this build decides from the same
// log (equal digests: bookings, slots, request records byte for byte),
// and answer every request id as the log's own replay does.
func TestMigrateSchema4(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.db")
	datatest.Gunzip(t, "testdata/index-schema4.db.gz", old)
	if _, err := data.Open(old); err == nil {
		t.Fatal("this build opened a schema 4 index")
	}
	migrated := filepath.Join(dir, "new.db")
	if err := data.Migrate(old, migrated, actor.MigrateRecord); err != nil {
		t.Fatal(err)
	}
	got, err := data.Open(migrated)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	datatest.CheckInvariants(t, got)

	log := genLog(77, 1200)
	msgs := make([]actor.Input, len(log))
	for i, m := range log {
		msgs[i] = m.in
	}
	want := datatest.MustOpen(t)
	applyInputs(t, want, 0, msgs...)
	dg, dw := digestOf(t, got), digestOf(t, want)
	if dg.Total != dw.Total {
		cal, _ := data.FirstDifference(dw, dg)
		t.Fatalf("migrated index differs from this build's replay, first at calendar %q (counts %v vs %v)", cal, dg.Counts, dw.Counts)
	}
	if dg.Counts["requests"] < 500 || dg.Counts["bookings"] < 200 {
		t.Fatalf("fixture too small: %v", dg.Counts)
	}
	n := 0
	for _, m := range msgs {
		cal, req := m.SubjectCalendar, requestID(t, m)
		var a, b []byte
		for s, out := range map[*data.Store]*[]byte{got: &a, want: &b} {
			_ = s.View(func(tx *data.Tx) error {
				if rec, ok, err := tx.Request(cal, req); err != nil {
					t.Fatal(err)
				} else if ok {
					*out = recordJSON(t, rec)
				}
				return nil
			})
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("request %s/%s: migrated record answers\n%s\nwant\n%s", cal, req, a, b)
		}
		if a != nil {
			n++
		}
	}
	if n < 500 {
		t.Fatalf("only %d request records compared", n)
	}
}
