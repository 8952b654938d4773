package data_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkCeilingBoltSequentialInsert is bbolt's own rate of inserting
// keys in ascending order in large transactions (65,536 keys each, not
// fsynced until the last, as a replay commits), without bookline's
// encoding or decisions: the ceiling of a bulk build of the index on this
// machine. Keys of 24 bytes (a sequence and an id), values of 96 bytes
// (about a compact booking). One op = one key; it also reports the file's
// bytes per key.
func BenchmarkCeilingBoltSequentialInsert(b *testing.B) {
	path := filepath.Join(b.TempDir(), "ceiling.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const perTx = 65536
	val := make([]byte, 96)
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(perTx, b.N-done)
		if err := db.Update(func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("k"))
			if err != nil {
				return err
			}
			bk.FillPercent = 0.9 // keys only ever grow: pages need little room
			var key [24]byte
			for i := done; i < done+n; i++ {
				binary.BigEndian.PutUint64(key[:8], uint64(i))
				if err := bk.Put(key[:], val); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		done += n
	}
	if err := db.Sync(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "keys/s")
	if st, err := os.Stat(path); err == nil {
		b.ReportMetric(float64(st.Size())/float64(b.N), "file-B/key")
	}
}
