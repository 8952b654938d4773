package data

import (
	"bytes"
	"time"
)

// DueHoldsWhere is DueHolds restricted to the calendars for which keep
// returns true: up to max of their holds that expire at or before now,
// earliest first. Holds of other calendars, however many, do not use up
// max.
func (t *Tx) DueHoldsWhere(now time.Time, max int, keep func(cal string) bool) []DueHold {
	b := t.bucket(bucketHolds)
	if b == nil {
		return nil
	}
	var out []DueHold
	nowKey := EncodeTime(now)
	c := b.Cursor()
	for k, _ := c.First(); k != nil && len(out) < max && bytes.Compare(k[:8], nowKey) <= 0; k, _ = c.Next() {
		cal, id, _ := bytes.Cut(k[8:], []byte{0})
		if !keep(string(cal)) {
			continue
		}
		out = append(out, DueHold{Calendar: string(cal), ID: string(id), Expires: DecodeTime(k[:8])})
	}
	return out
}
