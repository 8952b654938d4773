package data

import (
	"bytes"
	"hash/maphash"
	"maps"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// A write transaction keeps its writes to the shared trees (bookings, slots,
// request records) in memory, one ordered run per calendar and tree, and
// puts them into bbolt only when it commits: every tree's keys in key
// order, each written once however often the transaction changed it.
//
// bbolt keeps a leaf it changed in memory as one growing node until the
// commit splits it. Keys put in random order into such a node move half of
// it each time, so a large transaction into a young tree slows down with
// the square of its size (400,000 random puts into an empty tree took 686
// µs each, the same keys in order 5 µs each). In key order a leaf takes
// its keys at its end, and each key is put once: a replay commits larger
// chunks, which rewrite fewer leaves per command.
//
// Reads of the transaction see the run over bbolt: a key the run holds
// (written or deleted) answers from the run, every other key from bbolt,
// and cursors merge the two in key order. The answers are exactly what
// bbolt would give had every write gone to it at once: decisions do not
// depend on whether a write is still in memory.

// memRun is one calendar's pending writes to one shared tree: a skip list
// ordered by key (full keys, with the calendar prefix). A skip list keeps
// inserts O(log n) in any order, which a sorted slice does not for a busy
// calendar whose bookings arrive out of time order.
type memRun struct {
	head     memNode
	headNext [memMaxLevel]*memNode // head.next, allocated with the run
	level    int
	n        int
	seed     uint64
}

const memMaxLevel = 24

type memNode struct {
	key  []byte
	val  []byte // nil when del
	del  bool   // a tombstone: the key is deleted in this transaction
	next []*memNode
	// low holds next for the three nodes in four of height one, so that
	// they take one allocation and a walk stays in one object.
	low [1]*memNode
}

func newMemRun() *memRun {
	r := &memRun{level: 1, seed: 0x9e3779b97f4a7c15}
	r.head.next = r.headNext[:]
	return r
}

// randomLevel draws a node height (p = 1/4). The generator is seeded the
// same way every time; the shape of the list never shows in any answer.
func (r *memRun) randomLevel() int {
	r.seed ^= r.seed << 13
	r.seed ^= r.seed >> 7
	r.seed ^= r.seed << 17
	lvl, x := 1, r.seed
	for lvl < memMaxLevel && x&3 == 0 {
		lvl++
		x >>= 2
	}
	return lvl
}

// seek returns the first node whose key is >= key (nil: none), filling
// update, when given, with each level's last node before it.
func (r *memRun) seek(key []byte, update *[memMaxLevel]*memNode) *memNode {
	x := &r.head
	for i := r.level - 1; i >= 0; i-- {
		for n := x.next[i]; n != nil && bytes.Compare(n.key, key) < 0; n = x.next[i] {
			x = n
		}
		if update != nil {
			update[i] = x
		}
	}
	return x.next[0]
}

// get returns the run's value of key and whether the run knows the key at
// all (a deleted key is known, with a nil value).
func (r *memRun) get(key []byte) (val []byte, known bool) {
	n := r.seek(key, nil)
	if n == nil || !bytes.Equal(n.key, key) {
		return nil, false
	}
	return n.val, true
}

// set records val for key (del: a deletion). key is kept; val must stay
// unchanged until the transaction ends, as bbolt asks of its values.
func (r *memRun) set(key, val []byte, del bool) {
	var update [memMaxLevel]*memNode
	if n := r.seek(key, &update); n != nil && bytes.Equal(n.key, key) {
		n.val, n.del = val, del
		return
	}
	lvl := r.randomLevel()
	for i := r.level; i < lvl; i++ {
		update[i] = &r.head
	}
	r.level = max(r.level, lvl)
	n := &memNode{key: key, val: val, del: del}
	if lvl == 1 {
		n.next = n.low[:]
	} else {
		n.next = make([]*memNode, lvl)
	}
	for i := 0; i < lvl; i++ {
		n.next[i], update[i].next[i] = update[i].next[i], n
	}
	r.n++
}

// flush writes the run into b in key order and empties it, adding the
// keys it puts to f when given.
func (r *memRun) flush(b *bolt.Bucket, f *keyFilter) error {
	for n := r.head.next[0]; n != nil; n = n.next[0] {
		var err error
		if n.del {
			err = b.Delete(n.key)
		} else {
			err = b.Put(n.key, n.val)
			if f != nil {
				f.add(n.key)
			}
		}
		if err != nil {
			return err
		}
	}
	clear(r.head.next)
	r.level, r.n = 1, 0
	return nil
}

// flushRuns writes every calendar's pending runs into bbolt.
func (t *Tx) flushRuns() error {
	var runs [3][]*memRun
	for _, id := range slices.Sorted(maps.Keys(t.byCal)) {
		for i, ct := range t.byCal[id].subs {
			if ct != nil && ct.run != nil {
				runs[i] = append(runs[i], ct.run)
			}
		}
	}
	return t.flushInOrder(runs)
}

// flushInOrder writes runs[i] into tree i, tree by tree, each tree's runs
// in the order given: calendar order, which is the trees' key order (a
// calendar's prefix ends with a zero byte, which no id holds, so the
// order of the ids is the order of their keys).
func (t *Tx) flushInOrder(runs [3][]*memRun) error {
	for i, rs := range runs {
		b := t.tx.Bucket(treeNames[i])
		for _, r := range rs {
			if r.n == 0 {
				continue
			}
			if err := r.flush(b, t.filter(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// filter is the store's filter of tree i, nil if none. Taken at flush, not
// from the calTree: TrackKeys may have started after the calTree was made.
func (t *Tx) filter(i int) *keyFilter {
	if t.filters == nil {
		return nil
	}
	return t.filters[i]
}

// keyFilter is a Bloom filter of the keys a shared tree holds: "no" is
// certain, "maybe" asks bbolt. A replay asks for request ids and booking
// ids that are almost all new, and each such miss walked the tree from its
// root (two per booking created, a quarter of the replay's time).
// It is kept only while every key of the tree went through it (see
// Store.TrackKeys) and only the committer uses it, so it needs no lock.
// Deleted keys stay in it: a false "maybe" costs a lookup, nothing else.
type keyFilter struct {
	blocks [][8]uint64 // 512-bit blocks: a key's bits share a cache line
	seed   maphash.Seed
}

// filterBitsPerKey with six bits set per key gives about 1.5% false
// positives at the expected number of keys.
const filterBitsPerKey = 12

func newKeyFilter(keys int) *keyFilter {
	n := max(1, keys*filterBitsPerKey/512)
	return &keyFilter{blocks: make([][8]uint64, n), seed: maphash.MakeSeed()}
}

func (f *keyFilter) probe(key []byte, set bool) bool {
	h := maphash.Bytes(f.seed, key)
	b := &f.blocks[(h>>32)%uint64(len(f.blocks))]
	g := h * 0x9e3779b97f4a7c15 // six 9-bit bit indexes from a remix of h
	for i := 0; i < 6; i++ {
		bit := g >> (i * 9) & 511
		w, m := bit>>6, uint64(1)<<(bit&63)
		if set {
			b[w] |= m
		} else if b[w]&m == 0 {
			return false
		}
	}
	return true
}

func (f *keyFilter) add(key []byte)          { f.probe(key, true) }
func (f *keyFilter) mayHold(key []byte) bool { return f.probe(key, false) }

// Pending is writes to the shared trees kept across transactions, for
// building a new index in bulk (replay): CommitPending decides a large
// chunk of commands in one transaction, keeping its tree writes here, and
// FlushPending then puts them into bbolt in several smaller transactions,
// each a range of calendars in key order. A transaction that rewrites
// most leaves must find new pages for all of them before it frees the old
// ones, so one large transaction leaves a file with as many free pages as
// it rewrote; the smaller flushes reuse each other's. Between the two
// calls the file's other buckets are ahead of its trees: only an index
// nobody reads until the build ends may be built this way.
type Pending struct {
	cals map[string]*[3]*memRun
}

// NewPending returns an empty set of pending writes.
func NewPending() *Pending { return &Pending{cals: map[string]*[3]*memRun{}} }

func (p *Pending) run(calID string, i int) *memRun {
	runs := p.cals[calID]
	if runs == nil {
		runs = new([3]*memRun)
		p.cals[calID] = runs
	}
	if runs[i] == nil {
		runs[i] = newMemRun()
	}
	return runs[i]
}

// CommitPending is CommitUnsynced, its writes to the shared trees kept in p
// instead of put into bbolt (see Pending), and alone in its transaction.
// If fn fails, p holds part of its writes: the build must be abandoned.
func (s *Store) CommitPending(p *Pending, fn func(*Tx) error) error {
	return s.submit(&commitReq{fn: fn, err: make(chan error, 1), nosync: true, pending: p})
}

// FlushPending puts p's writes into bbolt in transactions of about perTx
// keys each (committed without fsync), calendars in key order, and empties
// p.
func (s *Store) FlushPending(p *Pending, perTx int) error {
	ids := slices.Sorted(maps.Keys(p.cals))
	for len(ids) > 0 {
		var (
			runs [3][]*memRun
			keys int
			n    int
		)
		for ; n < len(ids) && (n == 0 || keys < perTx); n++ {
			for i, r := range p.cals[ids[n]] {
				if r != nil {
					runs[i] = append(runs[i], r)
					keys += r.n
				}
			}
		}
		if err := s.CommitUnsynced(func(tx *Tx) error { return tx.flushInOrder(runs) }); err != nil {
			return err
		}
		for _, id := range ids[:n] {
			delete(p.cals, id)
		}
		ids = ids[n:]
	}
	return nil
}
