package data

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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

func openTemp(t testing.TB) *Store {
	t.Helper()
	s, err := OpenWith(filepath.Join(t.TempDir(), "index.db"), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPruneMarkSeesEarlierEntries prunes in one transaction (a write
// transaction and a fork), lists an entry that expires before the last
// one pruned, and requires the next prune to find it: the mark where a
// prune resumes must not hide entries listed after it was set.
func TestPruneMarkSeesEarlierEntries(t *testing.T) {
	at := func(i int) time.Time { return time.Unix(1_800_000_000+int64(i), 0) }
	rec := func(i int) RequestRecord {
		return RequestRecord{Fingerprint: "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f", Seq: uint64(i + 1), Reply: BinaryReply(`{}`), Expires: at(i)}
	}
	run := func(t *testing.T, tx *Tx) []int {
		var pruned []int
		for i := 0; i < 10; i++ {
			if err := tx.PutExpiringRequest(0, "a", fmt.Sprintf("r%d", i), rec(i)); err != nil {
				t.Fatal(err)
			}
		}
		n, err := tx.PruneRequests(0, at(5), 100) // r0..r5
		if err != nil {
			t.Fatal(err)
		}
		pruned = append(pruned, n)
		// Listed below the mark (expires at 2), then pruned with r6.
		if err := tx.PutExpiringRequest(0, "a", "late", rec(2)); err != nil {
			t.Fatal(err)
		}
		if n, err = tx.PruneRequests(0, at(6), 100); err != nil {
			t.Fatal(err)
		}
		pruned = append(pruned, n)
		if _, found, _ := tx.Request("a", "late"); found {
			t.Error("the record listed below the mark outlived its expiry")
		}
		return pruned
	}
	var direct []int
	s := openTemp(t)
	if err := s.Commit(func(tx *Tx) error { direct = run(t, tx); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []int{6, 2}; !slices.Equal(direct, want) {
		t.Fatalf("pruned %v in a write transaction, want %v", direct, want)
	}
	f, err := openTemp(t).Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Discard()
	if forked := run(t, f.Tx()); !slices.Equal(forked, direct) {
		t.Fatalf("pruned %v in a fork, %v in a write transaction", forked, direct)
	}
}

// BenchmarkPruneInOneTransaction lists a request expiry entry and prunes
// the due ones (at most 4) per op, all in one transaction, as a replay
// chunk of commands with short-lived records does: in a write transaction
// and in a fork, whose deletions stay in memory until the merge.
func BenchmarkPruneInOneTransaction(b *testing.B) {
	at := func(i int) time.Time { return time.Unix(1_800_000_000, int64(i)*int64(time.Millisecond)) }
	ops := func(b *testing.B, tx *Tx) {
		for i := 0; i < b.N; i++ {
			rec := RequestRecord{Fingerprint: "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f", Seq: uint64(i + 1), Reply: BinaryReply(`{}`), Expires: at(i + 10)}
			if err := tx.PutExpiringRequest(0, "a", fmt.Sprint(i), rec); err != nil {
				b.Fatal(err)
			}
			if _, err := tx.PruneRequests(0, at(i), 4); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("tx=write", func(b *testing.B) {
		s := openTemp(b)
		if err := s.Commit(func(tx *Tx) error { b.ResetTimer(); ops(b, tx); b.StopTimer(); return nil }); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("tx=fork", func(b *testing.B) {
		f, err := openTemp(b).Fork()
		if err != nil {
			b.Fatal(err)
		}
		defer f.Discard()
		b.ResetTimer()
		ops(b, f.Tx())
	})
}
