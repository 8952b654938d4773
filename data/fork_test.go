package data

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// kvOps runs n random writes, reads and cursor walks on buckets "x" and
// "y" (and "x"'s sub-buckets) through tx, and returns a transcript of
// every answer. The same seed gives the same operations.
func kvOps(t *testing.T, tx *Tx, seed uint64, n int) string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	var out strings.Builder
	key := func() []byte { return []byte{byte('a' + r.IntN(8)), byte('0' + r.IntN(3))}[:1+r.IntN(2)] }
	pick := func() *bkt {
		top := []byte{"xy"[r.IntN(2)]}
		b, err := tx.createBucket(top)
		if err != nil {
			t.Fatal(err)
		}
		if top[0] == 'x' && r.IntN(3) == 0 {
			if sub := b.Bucket([]byte{'n', byte('0' + r.IntN(2))}); sub != nil {
				return sub
			}
		}
		return b
	}
	for i := 0; i < n; i++ {
		b := pick()
		switch op := r.IntN(10); op {
		case 0, 1, 2:
			k, v := key(), []byte(fmt.Sprint(i))
			fmt.Fprintf(&out, "put %s %v\n", k, errName(b.Put(k, v)))
		case 3:
			k := key()
			fmt.Fprintf(&out, "del %s %v\n", k, errName(b.Delete(k)))
		case 4:
			k := key()
			fmt.Fprintf(&out, "get %s %q\n", k, b.Get(k))
		case 5:
			name := []byte{'n', byte('0' + r.IntN(2))}
			if r.IntN(3) == 0 {
				fmt.Fprintf(&out, "dropb %s %v\n", name, errName(b.DeleteBucket(name)))
			} else {
				_, err := b.CreateBucketIfNotExists(name)
				fmt.Fprintf(&out, "mkb %s %v\n", name, errName(err))
			}
		case 6:
			out.WriteString("walk")
			_ = b.ForEach(func(k, v []byte) error {
				fmt.Fprintf(&out, " %s=%q", k, v)
				return nil
			})
			out.WriteString("\n")
		case 7:
			c := b.Cursor()
			k, v := c.Seek(key())
			fmt.Fprintf(&out, "seek %s=%q", k, v)
			for j := 0; j < 3 && k != nil; j++ {
				k, v = c.Next()
				fmt.Fprintf(&out, " next %s=%q", k, v)
			}
			out.WriteString("\n")
		case 8:
			c := b.Cursor()
			k, v := c.Seek(key())
			fmt.Fprintf(&out, "seek %s=%q", k, v)
			for j := 0; j < 3; j++ {
				k, v = c.Prev()
				fmt.Fprintf(&out, " prev %s=%q", k, v)
				if k == nil {
					break
				}
			}
			out.WriteString("\n")
		case 9:
			c := b.Cursor()
			k, _ := c.Seek(key())
			if k != nil && b.Bucket(k) == nil {
				fmt.Fprintf(&out, "curdel %s %v", k, errName(c.Delete()))
				// bbolt's Next after a Delete may skip a key: seek again,
				// as the index's code does.
				k, _ = c.Seek(k)
				fmt.Fprintf(&out, " then %s\n", k)
			}
		}
	}
	return out.String()
}

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// dumpFile lists every bucket, key and value of the file.
func dumpFile(t *testing.T, s *Store) string {
	t.Helper()
	var out strings.Builder
	var walk func(b *bolt.Bucket, path string)
	walk = func(b *bolt.Bucket, path string) {
		_ = b.ForEach(func(k, v []byte) error {
			if v == nil {
				if sub := b.Bucket(k); sub != nil {
					walk(sub, path+string(k)+"/")
					return nil
				}
			}
			fmt.Fprintf(&out, "%s%s=%q\n", path, k, v)
			return nil
		})
	}
	if err := s.db.View(func(tx *bolt.Tx) error { walk(tx.Cursor().Bucket(), "/"); return nil }); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestForkReadsAndWritesAsBbolt runs the same random operations on two
// files with the same contents, one in a write transaction and one in a
// fork that is then merged, and requires every answer and the files to be
// equal.
func TestForkReadsAndWritesAsBbolt(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			direct, forked := openTemp(t), openTemp(t)
			for _, s := range []*Store{direct, forked} {
				if err := s.Commit(func(tx *Tx) error { kvOps(t, tx, seed*1000, 60); return nil }); err != nil {
					t.Fatal(err)
				}
			}
			var want string
			if err := direct.Commit(func(tx *Tx) error { want = kvOps(t, tx, seed, 200); return nil }); err != nil {
				t.Fatal(err)
			}
			f, err := forked.Fork()
			if err != nil {
				t.Fatal(err)
			}
			defer f.Discard()
			got := kvOps(t, f.Tx(), seed, 200)
			if got != want {
				t.Fatalf("answers differ:\nfork:\n%s\nbbolt:\n%s", got, want)
			}
			p := NewPending()
			if err := forked.CommitForks(p, []*Fork{f}); err != nil {
				t.Fatal(err)
			}
			f.Discard()
			if a, b := dumpFile(t, forked), dumpFile(t, direct); a != b {
				t.Fatalf("files differ:\nforked:\n%s\ndirect:\n%s", a, b)
			}
		})
	}
}

// TestForksDisjointMerge merges two forks that wrote different keys of the
// same buckets, created the same missing bucket, and refuses two that wrote
// one key.
func TestForksDisjointMerge(t *testing.T) {
	s := openTemp(t)
	fork := func(write func(tx *Tx) error) *Fork {
		f, err := s.Fork()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Discard)
		if err := write(f.Tx()); err != nil {
			t.Fatal(err)
		}
		return f
	}
	put := func(bucket, key string) func(tx *Tx) error {
		return func(tx *Tx) error {
			b, err := tx.createBucket([]byte(bucket))
			if err != nil {
				return err
			}
			return b.Put([]byte(key), []byte(key))
		}
	}
	a, b := fork(put("new", "a")), fork(put("new", "b"))
	if err := s.CommitForks(NewPending(), []*Fork{a, b}); err != nil {
		t.Fatal(err)
	}
	a.Discard()
	b.Discard()
	if got := dumpFile(t, s); !strings.Contains(got, "/new/a=\"a\"\n/new/b=\"b\"\n") {
		t.Fatalf("merged file:\n%s", got)
	}
	a, b = fork(put("new", "c")), fork(put("new", "c"))
	defer a.Discard()
	defer b.Discard()
	if err := s.CommitForks(NewPending(), []*Fork{a, b}); !errors.Is(err, ErrForkConflict) {
		t.Fatalf("CommitForks of two writes of one key = %v, want ErrForkConflict", err)
	}
	if got := dumpFile(t, s); strings.Contains(got, "/new/c=") {
		t.Fatalf("a refused merge left writes:\n%s", got)
	}
	if err := a.Tx().ResetPartition(0, func(string) bool { return true }); err == nil {
		t.Fatal("ResetPartition in a fork succeeded")
	}
}

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := OpenWith(filepath.Join(t.TempDir(), "index.db"), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
