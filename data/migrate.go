package data

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Schema 4 kept, per calendar, sub-buckets b (booking id -> AppendBooking),
// s (slots), r (request id -> record with the reply as sent) and the key
// maxspan in cal/<id>. A stream that was trimmed no longer holds the
// history to rebuild such an index from, so it is migrated instead: every
// record is carried over, the request records converted by the caller
// (the reply codec is the actor's), the slots recomputed from the
// bookings. Everything else is copied as it is.

// LegacyRecord is a request record of a schema 4 index.
type LegacyRecord struct {
	Calendar, RequestID, Fingerprint string
	Seq                              uint64
	Expires                          time.Time
	Reply                            []byte // actor.AppendReply's form
}

// MigratedRecord is what a LegacyRecord becomes: the creation record of
// Created (a booking of its calendar, as the request created it), or a
// record of its own with the compact Reply.
type MigratedRecord struct {
	Creation *Creation
	Created  *Booking
	Reply    BinaryReply
}

// ErrNotMigratable is returned by Migrate for an index it has no migration
// for.
var ErrNotMigratable = errors.New("data: no migration from this index schema")

// IndexSchema reads the schema version of the index at path.
func IndexSchema(path string) (string, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, ReadOnly: true})
	if err != nil {
		return "", fmt.Errorf("data: open %s: %w", path, err)
	}
	defer db.Close()
	var v string
	err = db.View(func(tx *bolt.Tx) error {
		if m := tx.Bucket(bucketMeta); m != nil {
			v = string(m.Get(keySchema))
		}
		return nil
	})
	return v, err
}

// Migrate writes the index at from, of schema 4, into a new index at to
// (which must not exist) in this build's layout, converting request
// records with convert. Every commit of the new file is synced; from is
// left as it was.
func Migrate(from, to string, convert func(LegacyRecord) (MigratedRecord, error)) error {
	if v, err := IndexSchema(from); err != nil {
		return err
	} else if v != "4" {
		return fmt.Errorf("%w %q", ErrNotMigratable, v)
	}
	if _, err := os.Stat(to); err == nil {
		return fmt.Errorf("data: migrate: %s exists", to)
	}
	old, err := bolt.Open(from, 0o600, &bolt.Options{Timeout: 2 * time.Second, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("data: open %s: %w", from, err)
	}
	defer old.Close()
	s, err := Open(to) // every commit synced: no session file to carry over
	if err != nil {
		return err
	}
	m := &migration{s: s, convert: convert}
	err = old.View(m.run)
	if err == nil {
		err = m.flush()
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = RemoveIndex(to)
	}
	return err
}

// migration writes the new index in transactions of about migrateBatch
// records, so that memory stays bounded for a large index.
type migration struct {
	s       *Store
	convert func(LegacyRecord) (MigratedRecord, error)
	pending []func(*Tx) error
}

const migrateBatch = 50000

func (m *migration) add(fn func(*Tx) error) error {
	m.pending = append(m.pending, fn)
	if len(m.pending) >= migrateBatch {
		return m.flush()
	}
	return nil
}

func (m *migration) flush() error {
	fns := m.pending
	m.pending = nil
	if len(fns) == 0 {
		return nil
	}
	return m.s.CommitUnsynced(func(tx *Tx) error {
		for _, fn := range fns {
			if err := fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
}

func (m *migration) run(old *bolt.Tx) error {
	err := old.ForEach(func(name []byte, b *bolt.Bucket) error {
		if bytes.Equal(name, bucketCal) {
			return nil
		}
		n := bytes.Clone(name)
		return m.copyBucket([][]byte{n}, b)
	})
	if err != nil {
		return err
	}
	cals := old.Bucket(bucketCal)
	if cals == nil {
		return nil
	}
	return cals.ForEach(func(k, v []byte) error {
		if v != nil {
			return nil
		}
		return m.calendar(string(k), cals.Bucket(k))
	})
}

// copyBucket copies b, nested buckets too, to the same path in the new
// index (the schema key excepted: the new index has its own).
func (m *migration) copyBucket(path [][]byte, b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		k = bytes.Clone(k)
		if v == nil {
			return m.copyBucket(append(append([][]byte(nil), path...), k), b.Bucket(k))
		}
		if len(path) == 1 && bytes.Equal(path[0], bucketMeta) && bytes.Equal(k, keySchema) {
			return nil
		}
		v = bytes.Clone(v)
		return m.add(func(tx *Tx) error {
			bk, err := tx.tx.CreateBucketIfNotExists(path[0])
			for _, p := range path[1:] {
				if err != nil {
					break
				}
				bk, err = bk.CreateBucketIfNotExists(p)
			}
			if err != nil {
				return err
			}
			return bk.Put(k, v)
		})
	})
}

// calendar carries over one calendar's bucket of the old layout.
func (m *migration) calendar(cal string, cb *bolt.Bucket) error {
	for _, sub := range [][]byte{subBusy, subBusySlots} {
		if b := cb.Bucket(sub); b != nil {
			if err := m.copyBucket([][]byte{bucketCal, []byte(cal), sub}, b); err != nil {
				return err
			}
		}
	}
	if v := cb.Get(keyBusySpan); v != nil {
		v = bytes.Clone(v)
		if err := m.add(func(tx *Tx) error {
			b, err := tx.calBucket(cal, true)
			if err != nil {
				return err
			}
			return b.Put(keyBusySpan, v)
		}); err != nil {
			return err
		}
	}
	// Creation records first, by booking id: a booking is written once,
	// with its creation record and its form as created.
	creations, err := m.requests(cal, cb.Bucket([]byte("r")))
	if err != nil {
		return err
	}
	var span time.Duration
	if v := cb.Get([]byte("maxspan")); len(v) == 8 {
		span = time.Duration(binary.BigEndian.Uint64(v))
	}
	if err := m.add(func(tx *Tx) error {
		if err := tx.calMark(cal); err != nil {
			return err
		}
		if span > 0 {
			return tx.growMaxSpan(cal, span)
		}
		return nil
	}); err != nil {
		return err
	}
	bb := cb.Bucket([]byte("b"))
	if bb == nil {
		return nil
	}
	return bb.ForEach(func(k, v []byte) error {
		bk, err := decodeBooking(v)
		if err != nil {
			return fmt.Errorf("data: migrate booking %s/%s: %w", cal, k, err)
		}
		var (
			cr       *Creation
			original []byte
		)
		if mr, ok := creations[bk.ID]; ok {
			cr = mr.Creation
			was := appendCompactBooking(nil, mr.Created, nil, nil)
			if !bytes.Equal(was, appendCompactBooking(nil, &bk, nil, nil)) {
				original = was
			}
		}
		return m.add(func(tx *Tx) error {
			if err := tx.calMark(cal); err != nil {
				return err
			}
			if err := tx.calTree(cal, iBookings).Put(idKey(bk.ID), appendCompactBooking(nil, &bk, cr, original)); err != nil {
				return err
			}
			if !Occupies(bk.Status) {
				return nil
			}
			return tx.calTree(cal, iSlots).Put(slotKey(bk.Start, bk.ID), encodeSlotValue(&bk))
		})
	})
}

// requests carries over calendar cal's request records of the old layout
// (bucket rb, nil when it has none) but the creation records, which it
// returns by booking id: a booking is written once, with its creation
// record and its form as created.
func (m *migration) requests(cal string, rb *bolt.Bucket) (map[string]MigratedRecord, error) {
	creations := map[string]MigratedRecord{}
	if rb == nil {
		return creations, nil
	}
	err := rb.ForEach(func(k, v []byte) error {
		rec, ok, err := decodeLegacyRecord(cal, string(k), v)
		if err != nil || !ok {
			return err
		}
		mr, err := m.convert(rec)
		if err != nil {
			return fmt.Errorf("data: migrate request %s/%s: %w", cal, k, err)
		}
		if mr.Creation != nil {
			if mr.Created == nil || mr.Created.ID != BookingID(cal, rec.RequestID) {
				return fmt.Errorf("data: migrate request %s/%s: a creation record without its booking", cal, k)
			}
			creations[mr.Created.ID] = mr
			return nil
		}
		fp, _ := hex.DecodeString(rec.Fingerprint)
		own := RequestRecord{Seq: rec.Seq, Expires: rec.Expires, Reply: mr.Reply}
		key := bytes.Clone(k)
		return m.add(func(tx *Tx) error {
			if err := tx.calMark(cal); err != nil {
				return err
			}
			return tx.calTree(cal, iRequests).Put(key, encodeRecord(fp, own))
		})
	})
	if err != nil {
		return nil, err
	}
	return creations, nil
}

// decodeLegacyRecord reads a schema 4 request record; ok is false for one
// that was ignored there too (the rejection of an invalid command, kept
// without a fingerprint by older versions).
func decodeLegacyRecord(cal, req string, v []byte) (rec LegacyRecord, ok bool, err error) {
	bad := fmt.Errorf("data: migrate request %s/%s: malformed record", cal, req)
	if len(v) < 10 {
		return rec, false, bad
	}
	rec.Calendar, rec.RequestID = cal, req
	rec.Seq = binary.BigEndian.Uint64(v[1:9])
	rest := v[9:]
	switch v[0] {
	case 1:
	case 2:
		if len(rest) < 9 {
			return rec, false, bad
		}
		rec.Expires = DecodeTime(rest[:8])
		rest = rest[8:]
	default:
		return rec, false, bad
	}
	n := int(rest[0])
	if len(rest) < 1+n {
		return rec, false, bad
	}
	if n == 0 {
		return rec, false, nil
	}
	rec.Fingerprint = string(rest[1 : 1+n])
	if fp, err := hex.DecodeString(rec.Fingerprint); err != nil || len(fp) != 16 {
		return rec, false, bad
	}
	rec.Reply = bytes.Clone(rest[1+n:])
	return rec, true, nil
}
