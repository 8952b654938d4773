package data

import (
	"bytes"
	"encoding/binary"
)

var keyStreamID = []byte("stream") // identity of the stream the index was built from

// StreamIdentity is the identity of the command stream this index was built
// from ("" for a new index).
func (t *Tx) StreamIdentity() string {
	return string(t.bucket(bucketMeta).Get(keyStreamID))
}

// SetStreamIdentity records the identity of the command stream.
func (t *Tx) SetStreamIdentity(id string) error {
	return t.bucket(bucketMeta).Put(keyStreamID, []byte(id))
}

// ResetPartition forgets everything partition p derived from the stream:
// every calendar for which belongs(id) is true, with its bookings, slots and
// request records, p's request expiry entries, and p's applied sequence,
// hash chain, horizon, log time, rules level and skipped commands. The
// partition then rebuilds from the start of the stream.
func (t *Tx) ResetPartition(p int, belongs func(calID string) bool) (err error) {
	if err := t.rawWritable(); err != nil {
		return err // it deletes the trees' keys in bbolt
	}
	if err := t.forgetCalendars(); err != nil {
		return err
	}
	defer func() {
		if ferr := t.forgetCalendars(); err == nil {
			err = ferr
		}
	}()
	root, cals, spans := t.bucket(bucketCal), t.bucket(bucketCalendars), t.bucket(bucketSpan)
	seen := map[string]bool{}
	var doomed [][]byte
	for _, b := range []*bkt{root, cals, spans} {
		_ = b.ForEach(func(k, _ []byte) error {
			if belongs(string(k)) && !seen[string(k)] {
				seen[string(k)] = true
				doomed = append(doomed, append([]byte(nil), k...))
			}
			return nil
		})
	}
	for _, k := range doomed {
		if root.Bucket(k) != nil {
			if err := root.DeleteBucket(k); err != nil {
				return err
			}
		}
		if err := cals.Delete(k); err != nil {
			return err
		}
		if err := spans.Delete(k); err != nil {
			return err
		}
		for _, name := range treeNames {
			if err := newCalTree(t.tx.Bucket(name), string(k)).DeleteAll(); err != nil {
				return err
			}
		}
		// Calendar sync outbox: the rebuild queues it again.
		if err := t.dropSync(string(k)); err != nil {
			return err
		}
	}
	if err := deleteWhere(t.bucket(bucketHolds), func(k []byte) bool {
		cal, _, ok := bytes.Cut(k[8:], []byte{0})
		return ok && belongs(string(cal))
	}); err != nil {
		return err
	}
	if err := t.dropPending(belongs); err != nil {
		return err
	}
	if err := t.dropPools(belongs); err != nil {
		return err
	}
	if err := t.dropLogNow(p); err != nil {
		return err
	}
	if err := t.dropLevels(p); err != nil {
		return err
	}
	if err := t.dropRequestExpiries(p, belongs); err != nil {
		return err
	}
	if err := t.dropHorizon(p); err != nil {
		return err
	}
	if err := t.dropChain(p); err != nil {
		return err
	}
	return t.bucket(bucketApplied).Delete(partitionKey(p))
}

// Applied lists every partition's applied sequence.
func (t *Tx) Applied() map[int]uint64 {
	out := map[int]uint64{}
	_ = t.bucket(bucketApplied).ForEach(func(k, v []byte) error {
		out[int(binary.BigEndian.Uint32(k))] = binary.BigEndian.Uint64(v)
		return nil
	})
	return out
}
