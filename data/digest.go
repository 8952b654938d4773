package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// Digest summarises the derived state of an index: two indexes built from
// the same log prefix with the same time zone data have equal digests. It
// covers the applied sequences, the time zone data releases that decided
// the index (Tx.TzdataVersions: decisions depend on them), every calendar
// and everything filed under it (bookings, slots, request records), and
// nothing that depends on when side effects ran (the event outbox) or on
// the rest of the file's history (meta). The partitions' log times
// (LogNow) are left out: each is a function of the stream up to the
// applied sequence, and an index from before they were kept has none
// until its partition's next command, which a replay would count as a
// difference where no decision differs.
type Digest struct {
	Total   string         `json:"total"`
	Applied map[int]uint64 `json:"applied"`
	// Tzdata is TzdataVersions: "" when none is recorded.
	Tzdata    string            `json:"tzdata,omitempty"`
	Calendars []CalendarDigest  `json:"calendars"`
	Counts    map[string]uint64 `json:"counts"`
	// History is, per partition, what the index recorded of the log it
	// applied: the hash chain's head, checkpoints and recent messages
	// (see chain.go). Not in Total: a check on the log, not state (and an
	// index from before chains were kept starts its chain later than a
	// replay's).
	History map[int]History `json:"history,omitempty"`
}

// CalendarDigest is the hash of one calendar's state.
type CalendarDigest struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
}

// Digest computes the index digest inside this transaction.
func (t *Tx) Digest() (Digest, error) {
	d := Digest{Applied: map[int]uint64{}, Counts: map[string]uint64{}}
	total := sha256.New()
	err := t.bucket(bucketApplied).ForEach(func(k, v []byte) error {
		d.Applied[int(binary.BigEndian.Uint32(k))] = binary.BigEndian.Uint64(v)
		// The sequence only: the hash of the message at it that follows
		// (SetApplied) is a check on the log, not state, and indexes
		// written before it was kept must still compare equal.
		hashKV(total, k, v[:8])
		return nil
	})
	if err != nil {
		return d, err
	}
	if d.History, err = t.Histories(); err != nil {
		return d, err
	}
	if d.Tzdata = t.TzdataVersions(); d.Tzdata != "" {
		hashKV(total, keyTzdata, []byte(d.Tzdata))
	}
	// Calendars that exist, and calendars that only have request records
	// (requests for a calendar that was never created are recorded too).
	ids := map[string]bool{}
	for _, id := range t.CalendarIDs() {
		ids[string(id)] = true
	}
	for _, b := range [][]byte{bucketCal, bucketSpan} {
		_ = t.bucket(b).ForEach(func(k, _ []byte) error {
			ids[string(k)] = true
			return nil
		})
	}
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Strings(sorted)
	for _, id := range sorted {
		h := sha256.New()
		hashKV(h, []byte("calendar"), t.bucket(bucketCalendars).Get([]byte(id)))
		for i, name := range [][]byte{[]byte("b"), []byte("s"), []byte("r")} {
			if err := hashRange(h, name, t.calTree(id, i), d.Counts); err != nil {
				return d, err
			}
		}
		if cb := t.bucket(bucketCal).Bucket([]byte(id)); cb != nil {
			for _, sub := range [][]byte{subBusy, subBusySlots} {
				b := cb.Bucket(sub)
				if b == nil {
					continue
				}
				if err := hashRange(h, sub, b, d.Counts); err != nil {
					return d, err
				}
			}
		}
		sum := hex.EncodeToString(h.Sum(nil))
		d.Calendars = append(d.Calendars, CalendarDigest{ID: id, Hash: sum})
		hashKV(total, []byte(id), []byte(sum))
	}
	// Pools (absent from every index before them, which keeps its
	// digest): a pool's record is a function of its token's log.
	if pb := t.bucket(bucketPools); pb != nil {
		_ = pb.ForEach(func(k, v []byte) error {
			sum := sha256.Sum256(v)
			d.Calendars = append(d.Calendars, CalendarDigest{ID: string(k), Hash: hex.EncodeToString(sum[:])})
			hashKV(total, k, v)
			return nil
		})
	}
	d.Total = hex.EncodeToString(total.Sum(nil))
	return d, nil
}

// hashRange hashes every key and value of b (a calendar's range of a
// shared tree, or one of its own buckets) under name.
func hashRange(h hash.Hash, name []byte, b interface {
	ForEach(func(k, v []byte) error) error
}, counts map[string]uint64) error {
	label := map[string]string{"b": "bookings", "s": "confirmed", "r": "requests", "k": "busy_blocks", "j": "busy_live"}[string(name)]
	bookings := label == "bookings"
	return b.ForEach(func(k, v []byte) error {
		counts[label]++
		if bookings && len(v) > 1 && v[1]&sbCreation != 0 {
			counts["requests"]++ // a creation's record, kept with its booking
		}
		hashKV(h, append(append([]byte{}, name...), k...), v)
		return nil
	})
}

// hashKV writes length-prefixed k and v, so that concatenations cannot
// collide.
func hashKV(h hash.Hash, k, v []byte) {
	var n [8]byte
	binary.BigEndian.PutUint32(n[:4], uint32(len(k)))
	binary.BigEndian.PutUint32(n[4:], uint32(len(v)))
	h.Write(n[:])
	h.Write(k)
	h.Write(v)
}

// FirstDifference names the first calendar (in id order) whose state differs
// between a and b, and whether any differs; "" with true means only the
// applied sequences or the time zone data (Tzdata) differ.
func FirstDifference(a, b Digest) (calendar string, differs bool) {
	if a.Total == b.Total {
		return "", false
	}
	i, j := 0, 0
	for i < len(a.Calendars) || j < len(b.Calendars) {
		switch {
		case j >= len(b.Calendars) || (i < len(a.Calendars) && a.Calendars[i].ID < b.Calendars[j].ID):
			return a.Calendars[i].ID, true
		case i >= len(a.Calendars) || b.Calendars[j].ID < a.Calendars[i].ID:
			return b.Calendars[j].ID, true
		case a.Calendars[i].Hash != b.Calendars[j].Hash:
			return a.Calendars[i].ID, true
		}
		i++
		j++
	}
	return "", true
}

// ContentHash hashes every bucket, key and value of the index except the
// meta bucket (the file's own history): two indexes that hold the same
// records have the same hash, whichever way they were written. Unlike
// Digest it covers everything, logs and outbox included; it is for tests
// and tools that compare two builds of the same log.
func (t *Tx) ContentHash() string {
	h := sha256.New()
	var walk func(b *bolt.Bucket, path []byte)
	walk = func(b *bolt.Bucket, path []byte) {
		_ = b.ForEach(func(k, v []byte) error {
			if v == nil {
				if sub := b.Bucket(k); sub != nil {
					if len(path) > 0 || !bytes.Equal(k, bucketMeta) {
						walk(sub, append(append(bytes.Clone(path), k...), '/'))
					}
					return nil
				}
			}
			hashKV(h, append(bytes.Clone(path), k...), v)
			return nil
		})
	}
	walk(t.tx.Cursor().Bucket(), nil)
	return hex.EncodeToString(h.Sum(nil))
}
