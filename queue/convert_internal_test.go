package queue

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/queue/queuetest"
)

// An index of the layout before this one is migrated in place of
// rebuilt (its stream may be trimmed), loudly, and kept aside; the
// migration itself is checked record by record by actor's
// TestMigrateSchema4, from the same fixture.
func TestConvertIndexMigratesTheLayoutBefore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	datatest.Gunzip(t, "../actor/testdata/index-schema4.db.gz", path)
	_, why := data.Open(path)
	logs := &queuetest.SyncBuffer{}
	s, err := convertIndex(path, why, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !bytes.Contains([]byte(logs.String()), []byte("INDEX LAYOUT CHANGED: migrating")) {
		t.Fatalf("no loud message:\n%s", logs.String())
	}
	if v, err := data.IndexSchema(path + ".old-schema"); err != nil || v != "4" {
		t.Fatalf("old index kept aside: %q, %v", v, err)
	}
	var d data.Digest
	if err := s.View(func(tx *data.Tx) (err error) { d, err = tx.Digest(); return err }); err != nil {
		t.Fatal(err)
	}
	if d.Counts["bookings"] == 0 || d.Counts["requests"] == 0 {
		t.Fatalf("migrated index holds %v", d.Counts)
	}
	if _, err := os.Stat(path + ".migrating"); !os.IsNotExist(err) {
		t.Fatalf("the migration's file is left: %v", err)
	}
}
