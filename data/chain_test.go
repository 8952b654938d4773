package data_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// links makes n messages of one partition at every third stream sequence
// from first on (the other sequences are other partitions').
func links(first uint64, n int) []data.Link {
	out := make([]data.Link, n)
	for i := range out {
		seq := first + 3*uint64(i)
		h := sha256.Sum256(binary.BigEndian.AppendUint64(nil, seq))
		out[i] = data.Link{Seq: seq, Hash: h[:16]}
	}
	return out
}

// TestChainDoesNotDependOnBatches: the head, checkpoints and recent
// messages follow from the messages alone, however they were cut into
// batches (a live writer's batches, a replay's chunks); the chain is
// ChainNext applied to each message in turn.
func TestChainDoesNotDependOnBatches(t *testing.T) {
	const n = 3*data.CheckpointEvery + 100
	all := links(5, n)
	want := data.ChainGenesis
	for _, l := range all {
		want = data.ChainNext(want, l.Seq, l.Hash)
	}
	var histories []data.History
	for _, batch := range []int{1, 7, 1000, data.CheckpointEvery, 2048, 1 << 20} {
		s := datatest.MustOpen(t)
		for i := 0; i < n; i += batch {
			chunk := all[i:min(i+batch, n)]
			mustCommit(t, s, func(tx *data.Tx) error { return tx.ExtendApplied(2, chunk) })
		}
		var h data.History
		mustView(t, s, func(tx *data.Tx) (err error) { h, err = tx.History(2); return err })
		if h.Head.Seq != all[n-1].Seq || !bytes.Equal(h.Head.Hash, all[n-1].Hash) || h.Head.Count != n || h.Head.Origin != 0 {
			t.Fatalf("batch %d: head %+v", batch, h.Head)
		}
		if !bytes.Equal(h.Head.Chain, want) {
			t.Fatalf("batch %d: chain %x, want %x", batch, h.Head.Chain, want)
		}
		if len(h.Checkpoints) != 3 {
			t.Fatalf("batch %d: %d checkpoints", batch, len(h.Checkpoints))
		}
		for i, c := range h.Checkpoints {
			if c.Count != uint64(i+1)*data.CheckpointEvery || c.Seq != all[c.Count-1].Seq || !bytes.Equal(c.Hash, all[c.Count-1].Hash) {
				t.Fatalf("batch %d: checkpoint %d: %+v", batch, i, c)
			}
		}
		// The recent messages: a contiguous run ending at the head that
		// holds at least every message after the checkpoint before the
		// newest one, and not much more.
		r := h.Recent
		if len(r) == 0 || r[len(r)-1].Seq != h.Head.Seq {
			t.Fatalf("batch %d: recent ends at %v", batch, r)
		}
		from := n - len(r)
		if r[0].Seq > h.Checkpoints[1].Seq+3 || from < 0 || len(r) > 2*data.CheckpointEvery+100+batch {
			t.Fatalf("batch %d: %d recent messages from seq %d (checkpoints %d, %d)", batch, len(r), r[0].Seq, h.Checkpoints[1].Seq, h.Checkpoints[2].Seq)
		}
		for i, l := range r {
			if l.Seq != all[from+i].Seq || !bytes.Equal(l.Hash, all[from+i].Hash) {
				t.Fatalf("batch %d: recent %d: %+v, want %+v", batch, i, l, all[from+i])
			}
		}
		histories = append(histories, h)
	}
	// What crosses the wire (GET /v1/admin/digest) reads back the same.
	for _, h := range histories {
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var back data.History
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if b2, _ := json.Marshal(back); !bytes.Equal(b, b2) || len(back.Recent) != len(h.Recent) || !bytes.Equal(back.Head.Chain, h.Head.Chain) {
			t.Fatalf("history JSON does not read back: %s", b)
		}
	}
}

// TestChainOfAnOlderIndex: a partition applied by a build before chains
// (an applied value of 8 or 24 bytes) starts its chain after its applied
// sequence; a reset drops the chain with the rest.
func TestChainOfAnOlderIndex(t *testing.T) {
	s := datatest.MustOpen(t)
	old := []byte("0123456789abcdef")
	mustCommit(t, s, func(tx *data.Tx) error { return tx.SetApplied(1, 40, old) })
	mustView(t, s, func(tx *data.Tx) error {
		if h := tx.ChainHead(1); h.Seq != 40 || !bytes.Equal(h.Hash, old) || h.Chain != nil {
			t.Errorf("head of an older index: %+v", h)
		}
		return nil
	})
	next := links(41, 3)
	mustCommit(t, s, func(tx *data.Tx) error { return tx.ExtendApplied(1, next) })
	want := data.ChainGenesis
	for _, l := range next {
		want = data.ChainNext(want, l.Seq, l.Hash)
	}
	mustView(t, s, func(tx *data.Tx) error {
		h := tx.ChainHead(1)
		if h.Origin != 40 || h.Count != 3 || !bytes.Equal(h.Chain, want) || h.Seq != next[2].Seq {
			t.Errorf("head after the first chained batch: %+v", h)
		}
		if seq, hash := tx.AppliedMsg(1); seq != next[2].Seq || !bytes.Equal(hash, next[2].Hash) {
			t.Errorf("AppliedMsg = %d %x", seq, hash)
		}
		return nil
	})
	if err := s.Commit(func(tx *data.Tx) error { return tx.ExtendApplied(1, links(41, 1)) }); err == nil {
		t.Error("a message at or below the applied sequence extended the chain")
	}
	mustCommit(t, s, func(tx *data.Tx) error { return tx.ExtendApplied(1, links(100, 2*data.CheckpointEvery)) })
	mustCommit(t, s, func(tx *data.Tx) error { return tx.ResetPartition(1, func(string) bool { return false }) })
	mustView(t, s, func(tx *data.Tx) error {
		h, err := tx.History(1)
		if h.Head.Seq != 0 || h.Head.Chain != nil || len(h.Checkpoints) != 0 || len(h.Recent) != 0 {
			t.Errorf("history after a reset: %+v", h)
		}
		return err
	})
}

// TestPruneCheckpoints keeps the last checkpoint below the stream's first
// sequence and everything after it.
func TestPruneCheckpoints(t *testing.T) {
	s := datatest.MustOpen(t)
	all := links(1, 5*data.CheckpointEvery)
	mustCommit(t, s, func(tx *data.Tx) error { return tx.ExtendApplied(0, all) })
	mustCommit(t, s, func(tx *data.Tx) error { return tx.ExtendApplied(1, all) })
	var cps []data.Checkpoint
	mustView(t, s, func(tx *data.Tx) error { cps = tx.Checkpoints(0); return nil })
	if len(cps) != 5 {
		t.Fatalf("%d checkpoints", len(cps))
	}
	mustCommit(t, s, func(tx *data.Tx) error { return tx.PruneCheckpoints(0, cps[3].Seq) })
	mustView(t, s, func(tx *data.Tx) error {
		got := tx.Checkpoints(0)
		if len(got) != 3 || got[0].Seq != cps[2].Seq {
			t.Errorf("after pruning below %d: %+v", cps[3].Seq, got)
		}
		if len(tx.Checkpoints(1)) != 5 {
			t.Error("pruning one partition touched another")
		}
		return nil
	})
}

// BenchmarkExtendApplied measures what recording the applied messages
// costs the writer's transaction: one op is one message, in batches of 256
// committed without fsync. "chain" is ExtendApplied (chain step, recent
// messages, a checkpoint every 1024); "applied" is what was written
// before chains (SetApplied once per batch), for the difference.
func BenchmarkExtendApplied(b *testing.B) {
	for _, mode := range []string{"applied", "chain"} {
		b.Run(mode, func(b *testing.B) {
			s, err := data.OpenWith(filepath.Join(b.TempDir(), "index.db"), data.Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			all := links(1, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for off := 0; off < b.N; off += 256 {
				batch := all[off:min(off+256, b.N)]
				mustCommit(b, s, func(tx *data.Tx) error {
					if mode == "chain" {
						return tx.ExtendApplied(0, batch)
					}
					last := batch[len(batch)-1]
					return tx.SetApplied(0, last.Seq, last.Hash)
				})
			}
		})
	}
}
