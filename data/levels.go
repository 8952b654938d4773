package data

import "encoding/binary"

// Two things a partition's writer keeps beside its applied sequence, each a
// function of the partition's log up to it (docs/protocol.md, "Versions"):
// the rules level it decides with, and the commands an operator skipped.
// Like the log time they are not part of the digest: a replay computes the
// same from the same log, and the decisions they lead to are.

// bucketRulesLevel holds each partition's rules level: partition (uint32
// big-endian) -> level (uint32 big-endian). A partition without a key is at
// level 1.
var bucketRulesLevel = []byte("ruleslevel")

// bucketSkipped holds the commands an operator skipped: partition (4) ++
// stream seq of the skipped command (8) -> stream seq of the skip (8).
var bucketSkipped = []byte("skipped")

// RulesLevel is partition p's rules level: 1 until a command of a higher
// schema version was decided on it, then the highest such version.
func (t *Tx) RulesLevel(p int) int {
	if b := t.bucket(bucketRulesLevel); b != nil {
		if v := b.Get(partitionKey(p)); len(v) == 4 {
			return int(binary.BigEndian.Uint32(v))
		}
	}
	return 1
}

// SetRulesLevel records partition p's rules level, in the same transaction
// as the applied sequence it goes with.
func (t *Tx) SetRulesLevel(p, level int) error {
	b, err := t.createBucket(bucketRulesLevel)
	if err != nil {
		return err
	}
	var v [4]byte
	binary.BigEndian.PutUint32(v[:], uint32(level))
	return b.Put(partitionKey(p), v[:])
}

// MarkSkipped records that partition p answered the command at stream
// sequence seq as skipped, because of the skip command at stream sequence
// by.
func (t *Tx) MarkSkipped(p int, seq, by uint64) error {
	b, err := t.createBucket(bucketSkipped)
	if err != nil {
		return err
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], by)
	return b.Put(chainKey(p, seq), v[:])
}

// SkippedBy is the stream sequence of the skip command because of which
// partition p skipped the command at seq, if it did.
func (t *Tx) SkippedBy(p int, seq uint64) (uint64, bool) {
	b := t.bucket(bucketSkipped)
	if b == nil {
		return 0, false
	}
	v := b.Get(chainKey(p, seq))
	if len(v) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(v), true
}

// dropLevels forgets partition p's rules level and skipped commands (the
// partition is rebuilt from the start of the stream).
func (t *Tx) dropLevels(p int) error {
	if b := t.bucket(bucketRulesLevel); b != nil {
		if err := b.Delete(partitionKey(p)); err != nil {
			return err
		}
	}
	b := t.bucket(bucketSkipped)
	if b == nil {
		return nil
	}
	var doomed [][]byte
	c := b.Cursor()
	prefix := partitionKey(p)
	for k, _ := c.Seek(prefix); len(k) == 12 && string(k[:4]) == string(prefix); k, _ = c.Next() {
		doomed = append(doomed, append([]byte(nil), k...))
	}
	for _, k := range doomed {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
