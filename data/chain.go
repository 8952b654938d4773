package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// The hash chain of a partition: what the index applied, in a form the
// stream can be checked against. A stream that changed under the index (a
// block file truncated or damaged on a NATS node, a store restored from an
// older copy, a leader that serves another history) would otherwise be
// replayed as truth.
//
// For every message the partition applies, in stream order:
//
//	chain_n = SHA-256(chain_{n-1} ++ seq_n (8, big-endian) ++ hash_n)[:16]
//
// where hash_n is the message's hash (actor.MessageHash: calendar token,
// stream timestamp, body) and chain_0 is ChainGenesis. The sequence is in
// it, so the same messages under other numbers give another chain. A
// partition applies every message of its subject filter in order (a
// redelivery is not applied again, and a command of a newer schema stops
// the partition before it), so the chain is a function of the partition's
// log alone: the same on every instance, in a replay and after a snapshot
// restore.
//
// Kept, per partition:
//
//   - the head, beside the applied sequence (bucket applied): the chain,
//     the number of messages in it, and its origin (the sequence after which
//     it starts: 0, or for an index from before chains were kept, the
//     applied sequence it had then);
//   - a checkpoint every CheckpointEvery messages (bucket chain): the
//     sequence, the count, the chain and the message's hash there;
//   - the recent messages (bucket chainlog): sequence and hash of every
//     message since the checkpoint before the newest one, so between
//     CheckpointEvery and 2*CheckpointEvery messages (a few more when a
//     batch straddles the cut), in values of one batch each.
//
// The first differing sequence of a stream can then be named exactly
// among the recent messages, and to a window between two checkpoints
// before them. Checkpoints below what the stream still holds are pruned
// (PruneCheckpoints), all but the last one.

// CheckpointEvery is how many messages of a partition lie between two
// checkpoints of its chain.
const CheckpointEvery = 1024

var (
	bucketChain    = []byte("chain")    // partition (4) ++ seq (8) -> count (8) ++ chain (16) ++ hash (16)
	bucketChainLog = []byte("chainlog") // partition (4) ++ first seq (8) -> last seq (8) ++ records
)

// ChainGenesis is the chain of a partition before its first message (the
// first 16 bytes of SHA-256("bookline-chain-v1")).
var ChainGenesis = func() []byte { s := sha256.Sum256([]byte("bookline-chain-v1")); return s[:16] }()

// ChainNext extends chain prev by the message with hash at stream sequence
// seq.
func ChainNext(prev []byte, seq uint64, hash []byte) []byte {
	var c [16]byte
	copy(c[:], prev)
	chainStep(&c, seq, hash)
	return c[:]
}

// chainStep is ChainNext in place, without allocating.
func chainStep(c *[16]byte, seq uint64, hash []byte) {
	var b [40]byte // one SHA-256 block
	copy(b[:16], c[:])
	binary.BigEndian.PutUint64(b[16:24], seq)
	copy(b[24:], hash)
	s := sha256.Sum256(b[:])
	copy(c[:], s[:16])
}

// Link is one applied message: its stream sequence and its hash.
type Link struct {
	Seq  uint64
	Hash []byte
}

// ChainHead is what the index keeps of a partition's chain beside its
// applied sequence.
type ChainHead struct {
	Seq  uint64 // the applied sequence
	Hash []byte // the hash of the message applied there (nil: none kept)
	// Chain is the chain through Seq (nil: no chain yet, an index from
	// before chains were kept).
	Chain []byte
	// Count is how many messages the chain covers: those after Origin.
	Count, Origin uint64
}

// Checkpoint is the chain at one message of the partition.
type Checkpoint struct {
	Seq   uint64
	Count uint64
	Chain []byte
	Hash  []byte // the message's hash
}

// appliedLen is the length of an applied value with a chain: seq (8),
// hash (16), chain (16), count (8), origin (8).
const appliedLen = 56

// ChainHead reads partition p's head. A value of 8 bytes (no hash) or 24
// (no chain), written by builds before these were kept, reads as such.
func (t *Tx) ChainHead(p int) ChainHead {
	v := t.bucket(bucketApplied).Get(partitionKey(p))
	var h ChainHead
	if len(v) < 8 {
		return h
	}
	h.Seq = binary.BigEndian.Uint64(v)
	if len(v) >= 24 {
		h.Hash = bytes.Clone(v[8:24])
	}
	if len(v) >= appliedLen {
		h.Chain = bytes.Clone(v[24:40])
		h.Count = binary.BigEndian.Uint64(v[40:48])
		h.Origin = binary.BigEndian.Uint64(v[48:56])
	}
	return h
}

// AppliedCount is partition p's applied sequence and the number of
// messages its chain covers (chained is false while it has none), read
// without allocating: the writer asserts with it, after every batch, that
// the batch advanced both by exactly the messages it decided.
func (t *Tx) AppliedCount(p int) (seq, count uint64, chained bool) {
	v := t.bucket(bucketApplied).Get(partitionKey(p))
	if len(v) >= 8 {
		seq = binary.BigEndian.Uint64(v)
	}
	if len(v) >= appliedLen {
		count, chained = binary.BigEndian.Uint64(v[40:48]), true
	}
	return seq, count, chained
}

// ExtendApplied records links, the messages partition p applied after its
// applied sequence (in stream order), in the same transaction as the
// changes they caused: the applied sequence becomes the last one's, the
// chain is extended by each, and the checkpoints and recent messages are
// kept. A partition without a chain starts one here, after its applied
// sequence.
func (t *Tx) ExtendApplied(p int, links []Link) error {
	if len(links) == 0 {
		return nil
	}
	h := t.ChainHead(p)
	if h.Chain == nil {
		h.Chain, h.Count, h.Origin = ChainGenesis, 0, h.Seq
	}
	var chain [16]byte
	copy(chain[:], h.Chain)
	var crossed []uint64 // checkpoints written by this batch
	for _, l := range links {
		if l.Seq <= h.Seq {
			return fmt.Errorf("data: partition %d: message at seq %d does not follow the applied seq %d", p, l.Seq, h.Seq)
		}
		chainStep(&chain, l.Seq, l.Hash)
		h.Count++
		h.Seq, h.Hash = l.Seq, l.Hash
		if h.Count%CheckpointEvery == 0 {
			if err := t.putCheckpoint(p, Checkpoint{Seq: l.Seq, Count: h.Count, Chain: chain[:], Hash: l.Hash}); err != nil {
				return err
			}
			crossed = append(crossed, l.Seq)
		}
	}
	h.Chain = chain[:]
	// The recent messages kept are those after the checkpoint before the
	// newest one: of a large batch (a replay's chunk) only its tail.
	var floor uint64
	switch len(crossed) {
	case 0:
	case 1:
		floor = t.checkpointBefore(p, crossed[0])
	default:
		floor = crossed[len(crossed)-2]
	}
	keep := links
	for len(keep) > 0 && keep[0].Seq <= floor {
		keep = keep[1:]
	}
	if len(keep) > 0 {
		if err := t.logRecent(p, keep); err != nil {
			return err
		}
	}
	if len(crossed) > 0 {
		if err := t.pruneRecent(p, floor); err != nil {
			return err
		}
	}
	v := make([]byte, appliedLen)
	binary.BigEndian.PutUint64(v, h.Seq)
	copy(v[8:24], h.Hash)
	copy(v[24:40], h.Chain)
	binary.BigEndian.PutUint64(v[40:48], h.Count)
	binary.BigEndian.PutUint64(v[48:56], h.Origin)
	return t.bucket(bucketApplied).Put(partitionKey(p), v)
}

// chainKey is the key of partition p's entry at stream sequence seq in
// the chain, chain log and skipped buckets: partition (4) ++ seq (8).
func chainKey(p int, seq uint64) []byte {
	k := make([]byte, 12)
	binary.BigEndian.PutUint32(k, uint32(p))
	binary.BigEndian.PutUint64(k[4:], seq)
	return k
}

func (t *Tx) putCheckpoint(p int, c Checkpoint) error {
	b, err := t.createBucket(bucketChain)
	if err != nil {
		return err
	}
	v := make([]byte, 40)
	binary.BigEndian.PutUint64(v, c.Count)
	copy(v[8:24], c.Chain)
	copy(v[24:40], c.Hash)
	return b.Put(chainKey(p, c.Seq), v)
}

// checkpointBefore is the sequence of p's checkpoint before the one at seq
// (0: none).
func (t *Tx) checkpointBefore(p int, seq uint64) uint64 {
	b := t.bucket(bucketChain)
	if b == nil {
		return 0
	}
	c := b.Cursor()
	c.Seek(chainKey(p, seq))
	k, _ := c.Prev()
	if len(k) != 12 || int(binary.BigEndian.Uint32(k)) != p {
		return 0
	}
	return binary.BigEndian.Uint64(k[4:])
}

// Checkpoints lists partition p's checkpoints in stream order.
func (t *Tx) Checkpoints(p int) []Checkpoint {
	b := t.bucket(bucketChain)
	if b == nil {
		return nil
	}
	var out []Checkpoint
	c := b.Cursor()
	prefix := partitionKey(p)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(k) != 12 || len(v) != 40 {
			continue
		}
		out = append(out, Checkpoint{Seq: binary.BigEndian.Uint64(k[4:]), Count: binary.BigEndian.Uint64(v),
			Chain: bytes.Clone(v[8:24]), Hash: bytes.Clone(v[24:40])})
	}
	return out
}

// PruneCheckpoints drops partition p's checkpoints below stream sequence
// seq but the last of them: the stream no longer holds their messages, and
// the last one still opens the window that follows it.
func (t *Tx) PruneCheckpoints(p int, seq uint64) error {
	b := t.bucket(bucketChain)
	if b == nil {
		return nil
	}
	c := b.Cursor()
	var doomed [][]byte
	prefix := partitionKey(p)
	var prev []byte
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(k) == 12 && binary.BigEndian.Uint64(k[4:]) < seq; k, _ = c.Next() {
		if prev != nil {
			doomed = append(doomed, prev)
		}
		prev = bytes.Clone(k)
	}
	for _, k := range doomed {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// logRecent appends links to p's recent messages: one value per batch,
// the last sequence (8), then per message the difference to the one before
// (uvarint; 0 for the first, whose sequence is in the key) and its hash.
func (t *Tx) logRecent(p int, links []Link) error {
	b, err := t.createBucket(bucketChainLog)
	if err != nil {
		return err
	}
	return b.Put(chainKey(p, links[0].Seq), encodeRecent(links))
}

// encodeRecent packs links as the index keeps them (decodeRecent reads
// them): the last sequence (8), then per message the difference to the
// one before (uvarint; 0 for the first) and its hash (16).
func encodeRecent(links []Link) []byte {
	v := make([]byte, 8, 8+len(links)*(2+16))
	binary.BigEndian.PutUint64(v, links[len(links)-1].Seq)
	prev := links[0].Seq
	for _, l := range links {
		v = binary.AppendUvarint(v, l.Seq-prev)
		v = append(v, l.Hash[:16]...)
		prev = l.Seq
	}
	return v
}

// pruneRecent drops p's recent messages at or below seq, in whole batches.
func (t *Tx) pruneRecent(p int, seq uint64) error {
	b := t.bucket(bucketChainLog)
	if b == nil || seq == 0 {
		return nil
	}
	c := b.Cursor()
	prefix := partitionKey(p)
	var doomed [][]byte
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(v) >= 8 && binary.BigEndian.Uint64(v) <= seq; k, v = c.Next() {
		doomed = append(doomed, bytes.Clone(k))
	}
	for _, k := range doomed {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// RecentLinks lists partition p's recent messages in stream order: every
// message of the partition it applied from the first one listed on.
func (t *Tx) RecentLinks(p int) ([]Link, error) {
	b := t.bucket(bucketChainLog)
	if b == nil {
		return nil, nil
	}
	var out []Link
	c := b.Cursor()
	prefix := partitionKey(p)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var err error
		if out, err = decodeRecent(out, binary.BigEndian.Uint64(k[4:]), v); err != nil {
			return nil, fmt.Errorf("data: partition %d recent messages: %w", p, err)
		}
	}
	return out, nil
}

var errBadRecent = errors.New("malformed record")

func decodeRecent(out []Link, seq uint64, v []byte) ([]Link, error) {
	if len(v) < 8 {
		return out, errBadRecent
	}
	for v = v[8:]; len(v) > 0; {
		d, n := binary.Uvarint(v)
		if n <= 0 || len(v) < n+16 {
			return out, errBadRecent
		}
		seq += d
		out = append(out, Link{Seq: seq, Hash: bytes.Clone(v[n : n+16])})
		v = v[n+16:]
	}
	return out, nil
}

// dropChain forgets partition p's checkpoints and recent messages (its
// head goes with the applied sequence).
func (t *Tx) dropChain(p int) error {
	for _, name := range [][]byte{bucketChain, bucketChainLog} {
		b := t.bucket(name)
		if b == nil {
			continue
		}
		c := b.Cursor()
		prefix := partitionKey(p)
		var doomed [][]byte
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			doomed = append(doomed, bytes.Clone(k))
		}
		for _, k := range doomed {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
	}
	return nil
}

// History is what the index recorded of partition p's log.
type History struct {
	Head        ChainHead
	Checkpoints []Checkpoint
	Recent      []Link
}

// History reads partition p's history.
func (t *Tx) History(p int) (History, error) {
	h := History{Head: t.ChainHead(p), Checkpoints: t.Checkpoints(p)}
	var err error
	h.Recent, err = t.RecentLinks(p)
	return h, err
}

// historyJSON is History on the wire (GET /v1/admin/digest): hashes in
// hex, the recent messages packed as in the index (base64).
type historyJSON struct {
	Seq         uint64           `json:"seq"`
	Hash        string           `json:"hash,omitempty"`
	Chain       string           `json:"chain,omitempty"`
	Count       uint64           `json:"count"`
	Origin      uint64           `json:"origin"`
	Checkpoints []checkpointJSON `json:"checkpoints,omitempty"`
	Recent      string           `json:"recent,omitempty"`
	RecentFirst uint64           `json:"recent_first,omitempty"`
}

type checkpointJSON struct {
	Seq   uint64 `json:"seq"`
	Count uint64 `json:"count"`
	Chain string `json:"chain"`
	Hash  string `json:"hash"`
}

// MarshalJSON writes h compactly.
func (h History) MarshalJSON() ([]byte, error) {
	j := historyJSON{Seq: h.Head.Seq, Hash: hex.EncodeToString(h.Head.Hash), Chain: hex.EncodeToString(h.Head.Chain),
		Count: h.Head.Count, Origin: h.Head.Origin}
	for _, c := range h.Checkpoints {
		j.Checkpoints = append(j.Checkpoints, checkpointJSON{Seq: c.Seq, Count: c.Count, Chain: hex.EncodeToString(c.Chain), Hash: hex.EncodeToString(c.Hash)})
	}
	if len(h.Recent) > 0 {
		j.RecentFirst, j.Recent = h.Recent[0].Seq, base64.StdEncoding.EncodeToString(encodeRecent(h.Recent))
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (h *History) UnmarshalJSON(b []byte) error {
	var j historyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	unhex := func(s string) ([]byte, error) {
		if s == "" {
			return nil, nil
		}
		return hex.DecodeString(s)
	}
	var err error
	*h = History{Head: ChainHead{Seq: j.Seq, Count: j.Count, Origin: j.Origin}}
	if h.Head.Hash, err = unhex(j.Hash); err != nil {
		return err
	}
	if h.Head.Chain, err = unhex(j.Chain); err != nil {
		return err
	}
	for _, c := range j.Checkpoints {
		cp := Checkpoint{Seq: c.Seq, Count: c.Count}
		if cp.Chain, err = unhex(c.Chain); err != nil {
			return err
		}
		if cp.Hash, err = unhex(c.Hash); err != nil {
			return err
		}
		h.Checkpoints = append(h.Checkpoints, cp)
	}
	if j.Recent != "" {
		v, err := base64.StdEncoding.DecodeString(j.Recent)
		if err != nil {
			return err
		}
		if h.Recent, err = decodeRecent(nil, j.RecentFirst, v); err != nil {
			return err
		}
	}
	return nil
}

// Histories reads every partition's history (those with an applied
// sequence).
func (t *Tx) Histories() (map[int]History, error) {
	out := map[int]History{}
	err := t.bucket(bucketApplied).ForEach(func(k, _ []byte) error {
		if len(k) != 4 {
			return nil
		}
		p := int(binary.BigEndian.Uint32(k))
		h, err := t.History(p)
		out[p] = h
		return err
	})
	return out, err
}
