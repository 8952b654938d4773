package data

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestPendingWritesReadAsBbolt runs the same random writes, reads and
// cursor walks on the shared trees of two files, one written straight to
// bbolt and one through the pending runs (with a key filter, as a replay
// has), over many transactions, and requires every answer and the files'
// contents to be equal.
func TestPendingWritesReadAsBbolt(t *testing.T) {
	open := func(name string) *bolt.DB {
		db, err := bolt.Open(filepath.Join(t.TempDir(), name), 0o600, &bolt.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if err := db.Update(func(tx *bolt.Tx) error {
			for _, n := range treeNames {
				if _, err := tx.CreateBucket(n); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return db
	}
	direct, buffered := open("direct.db"), open("buffered.db")
	// Few keys per calendar so that puts, deletes and reads hit each
	// other; calendar ids that are prefixes of each other ("c1", "c10").
	cals := []string{"c1", "c10", "c2", "c"}
	rng := rand.New(rand.NewPCG(7, 9))
	key := func() []byte {
		k := make([]byte, 1+rng.IntN(3))
		for i := range k {
			k[i] = byte('a' + rng.IntN(4))
		}
		return k
	}
	filters := [3]*keyFilter{newKeyFilter(64), newKeyFilter(64), newKeyFilter(64)}
	for round := 0; round < 300; round++ {
		dtx, err := direct.Begin(true)
		if err != nil {
			t.Fatal(err)
		}
		btx, err := buffered.Begin(true)
		if err != nil {
			t.Fatal(err)
		}
		d := &Tx{tx: dtx}
		b := &Tx{tx: btx, buffered: true, filters: &filters}
		var log []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("round %d, after %q: "+format, append([]any{round, log}, args...)...)
		}
		for op := 0; op < 40; op++ {
			cal, tree := cals[rng.IntN(len(cals))], rng.IntN(3)
			dt, bt := d.calTree(cal, tree), b.calTree(cal, tree)
			switch r := rng.IntN(100); {
			case r < 35:
				k, v := key(), []byte(fmt.Sprint(round, op))
				log = append(log, fmt.Sprintf("put %s/%d/%s", cal, tree, k))
				if err := dt.Put(k, v); err != nil {
					t.Fatal(err)
				}
				if err := bt.Put(k, v); err != nil {
					t.Fatal(err)
				}
			case r < 50:
				k := key()
				log = append(log, fmt.Sprintf("del %s/%d/%s", cal, tree, k))
				if err := dt.Delete(k); err != nil {
					t.Fatal(err)
				}
				if err := bt.Delete(k); err != nil {
					t.Fatal(err)
				}
			case r < 75:
				k := key()
				if got, want := bt.Get(k), dt.Get(k); !bytes.Equal(got, want) || (got == nil) != (want == nil) {
					fail("get %s/%d/%s = %q, bbolt says %q", cal, tree, k, got, want)
				}
			case r < 97:
				dc, bc := dt.Cursor(), bt.Cursor()
				var dk, dv, bk, bv []byte
				if rng.IntN(3) == 0 {
					dk, dv = dc.First()
					bk, bv = bc.First()
				} else {
					k := key()
					dk, dv = dc.Seek(k)
					bk, bv = bc.Seek(k)
				}
				for steps := 0; ; steps++ {
					if !bytes.Equal(dk, bk) || !bytes.Equal(dv, bv) || (dk == nil) != (bk == nil) {
						fail("cursor on %s/%d at step %d: %q=%q, bbolt says %q=%q", cal, tree, steps, bk, bv, dk, dv)
					}
					if dk == nil {
						break
					}
					dk, dv = dc.Next()
					bk, bv = bc.Next()
				}
			case r < 99:
				log = append(log, "flush")
				if err := b.forgetCalendars(); err != nil {
					t.Fatal(err)
				}
				if err := d.forgetCalendars(); err != nil {
					t.Fatal(err)
				}
			default:
				log = append(log, fmt.Sprintf("delete all %s/%d", cal, tree))
				if err := dt.DeleteAll(); err != nil {
					t.Fatal(err)
				}
				if err := bt.DeleteAll(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := b.flushRuns(); err != nil {
			t.Fatal(err)
		}
		if err := dtx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := btx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	dump := func(db *bolt.DB) string {
		var out bytes.Buffer
		_ = db.View(func(tx *bolt.Tx) error {
			for _, n := range treeNames {
				_ = tx.Bucket(n).ForEach(func(k, v []byte) error {
					fmt.Fprintf(&out, "%s %q=%q\n", n, k, v)
					return nil
				})
			}
			return nil
		})
		return out.String()
	}
	if got, want := dump(buffered), dump(direct); got != want {
		t.Fatalf("files differ:\nbuffered:\n%s\ndirect:\n%s", got, want)
	}
	if dump(direct) == "" {
		t.Fatal("the test wrote nothing")
	}
}

// TestKeyFilterHasNoFalseNegatives checks that every key added is reported
// as possibly present, and that absent keys are mostly reported absent.
func TestKeyFilterHasNoFalseNegatives(t *testing.T) {
	const n = 100000
	f := newKeyFilter(n)
	for i := 0; i < n; i++ {
		f.add([]byte(fmt.Sprintf("cal\x00req-%d", i)))
	}
	for i := 0; i < n; i++ {
		if !f.mayHold([]byte(fmt.Sprintf("cal\x00req-%d", i))) {
			t.Fatalf("key %d added but reported absent", i)
		}
	}
	fp := 0
	for i := n; i < 2*n; i++ {
		if f.mayHold([]byte(fmt.Sprintf("cal\x00req-%d", i))) {
			fp++
		}
	}
	if rate := float64(fp) / n; rate > 0.05 {
		t.Fatalf("false positive rate %.3f, want about 0.015", rate)
	}
}

// TestTrackKeysNeedsAnEmptyIndex: a filter that missed keys already in the
// trees would answer "absent" for them.
func TestTrackKeysNeedsAnEmptyIndex(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Commit(func(tx *Tx) error { return tx.calTree("c", iRequests).Put([]byte("r"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := s.TrackKeys(10); err == nil {
		t.Fatal("TrackKeys accepted an index with request records")
	}
}

// TestIDKeyCanonical: only the canonical spelling of 16 bytes gets the raw
// key; every other 26-character id keeps its text, so no two ids share a
// key.
func TestIDKeyCanonical(t *testing.T) {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABC\n="
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]string{}
	for i := 0; i < 200000; i++ {
		b := make([]byte, 26)
		for j := range b {
			n := 32
			if rng.IntN(50) == 0 {
				n = len(alphabet)
			}
			b[j] = alphabet[rng.IntN(n)]
		}
		id := string(b)
		k := idKey(id)
		var raw [16]byte
		n, err := idEncoding.Decode(raw[:], b)
		canonical := err == nil && n == 16 && idEncoding.EncodeToString(raw[:]) == id
		if (k[0] == idRaw) != canonical {
			t.Fatalf("idKey(%q) raw=%v, canonical=%v", id, k[0] == idRaw, canonical)
		}
		if back, _ := idFromKey(k); back != id {
			t.Fatalf("idFromKey(idKey(%q)) = %q", id, back)
		}
		if other, ok := seen[string(k)]; ok && other != id {
			t.Fatalf("%q and %q share a key", id, other)
		}
		seen[string(k)] = id
	}
}

// TestPendingAcrossTransactions applies the same random chunks of writes
// and reads to two stores, one with Commit and one with CommitPending and
// FlushPending in transactions of a few keys, and requires the same reads
// in every chunk and the same trees at the end.
func TestPendingAcrossTransactions(t *testing.T) {
	open := func(name string) *Store {
		s, err := Open(filepath.Join(t.TempDir(), name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	direct, kept := open("direct.db"), open("kept.db")
	if err := kept.TrackKeys(100); err != nil {
		t.Fatal(err)
	}
	type op struct {
		kind, tree int
		cal        string
		key, val   []byte
	}
	cals := []string{"c1", "c10", "c2", "c"}
	rng := rand.New(rand.NewPCG(3, 4))
	key := func() []byte { return []byte{byte('a' + rng.IntN(5)), byte('a' + rng.IntN(3))} }
	apply := func(ops []op, reads *[]string) func(*Tx) error {
		return func(tx *Tx) error {
			*reads = (*reads)[:0]
			for _, o := range ops {
				ct := tx.calTree(o.cal, o.tree)
				switch o.kind {
				case 0:
					if err := ct.Put(o.key, o.val); err != nil {
						return err
					}
				case 1:
					if err := ct.Delete(o.key); err != nil {
						return err
					}
				case 2:
					*reads = append(*reads, fmt.Sprintf("get %q", ct.Get(o.key)))
				default:
					c := ct.Cursor()
					for k, v := c.Seek(o.key); k != nil; k, v = c.Next() {
						*reads = append(*reads, fmt.Sprintf("%q=%q", k, v))
					}
					*reads = append(*reads, "end")
				}
			}
			return nil
		}
	}
	for chunk := 0; chunk < 60; chunk++ {
		var ops []op
		for i := 0; i < 30; i++ {
			ops = append(ops, op{kind: rng.IntN(4), tree: rng.IntN(3), cal: cals[rng.IntN(len(cals))], key: key(), val: []byte(fmt.Sprint(chunk, i))})
		}
		var want, got []string
		if err := direct.Commit(apply(ops, &want)); err != nil {
			t.Fatal(err)
		}
		p := NewPending()
		if err := kept.CommitPending(p, apply(ops, &got)); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("chunk %d: reads %v, want %v", chunk, got, want)
		}
		if err := kept.FlushPending(p, 3); err != nil {
			t.Fatal(err)
		}
		if len(p.cals) != 0 {
			t.Fatalf("chunk %d: %d calendars still pending after the flush", chunk, len(p.cals))
		}
	}
	dump := func(s *Store) string {
		var out bytes.Buffer
		_ = s.View(func(tx *Tx) error {
			for _, n := range treeNames {
				_ = tx.tx.Bucket(n).ForEach(func(k, v []byte) error {
					fmt.Fprintf(&out, "%s %q=%q\n", n, k, v)
					return nil
				})
			}
			return nil
		})
		return out.String()
	}
	if got, want := dump(kept), dump(direct); got != want || want == "" {
		t.Fatalf("trees differ:\nkept:\n%s\ndirect:\n%s", got, want)
	}
}
