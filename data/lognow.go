package data

import "time"

// bucketLogNow holds each partition's log time: partition (uint32
// big-endian) -> EncodeTime of the latest stream timestamp the partition
// decided a command with. Created on first use; an index without it (or
// without a partition's key) has no log time yet.
var bucketLogNow = []byte("lognow")

// LogNow is partition p's log time: the latest stream timestamp of the
// commands it decided, which is "now" for its next decision unless that
// command's own timestamp is later. Zero before the first.
func (t *Tx) LogNow(p int) time.Time {
	b := t.bucket(bucketLogNow)
	if b == nil {
		return time.Time{}
	}
	v := b.Get(partitionKey(p))
	if len(v) != 8 {
		return time.Time{}
	}
	return DecodeTime(v)
}

// SetLogNow records partition p's log time, in the same transaction as the
// applied sequence it goes with. The zero time removes it.
func (t *Tx) SetLogNow(p int, now time.Time) error {
	if now.IsZero() {
		return t.dropLogNow(p)
	}
	b, err := t.createBucket(bucketLogNow)
	if err != nil {
		return err
	}
	return b.Put(partitionKey(p), EncodeTime(now))
}

// LatestLogNow is the latest log time of any partition (zero if none): the
// stream's clock as far as this index has seen it.
func (t *Tx) LatestLogNow() time.Time {
	var latest time.Time
	if b := t.bucket(bucketLogNow); b != nil {
		_ = b.ForEach(func(_, v []byte) error {
			if len(v) == 8 {
				if now := DecodeTime(v); now.After(latest) {
					latest = now
				}
			}
			return nil
		})
	}
	return latest
}

// dropLogNow forgets partition p's log time (the partition is rebuilt from
// the start of the stream).
func (t *Tx) dropLogNow(p int) error {
	if b := t.bucket(bucketLogNow); b != nil {
		return b.Delete(partitionKey(p))
	}
	return nil
}
