package data

import (
	"bytes"
	"sync"
)

// calCache keeps decoded calendars, so that the writer does not decode the
// same calendar JSON for every booking (a few microseconds each, inside the
// transaction every partition shares).
//
// An entry is the stored bytes together with what they decode to. A lookup
// reads the stored bytes in its own transaction and uses the entry only if
// they are equal, so the cache can never answer with another version than
// the transaction sees: a calendar changed by a later (or rolled-back)
// transaction just misses and is decoded again. That keeps it correct for
// concurrent read transactions, for write transactions that roll back and
// for a store rebuilt underneath without any invalidation.
type calCache struct {
	mu sync.RWMutex
	m  map[string]*cachedCalendar
}

type cachedCalendar struct {
	raw []byte
	cal Calendar
}

// maxCachedCalendars bounds the cache's memory; past it an arbitrary entry
// makes room (any choice gives the same answers, only the hit rate varies).
const maxCachedCalendars = 1 << 14

// get returns the decoded calendar id if raw is what was cached for it.
func (c *calCache) get(id string, raw []byte) (Calendar, bool) {
	c.mu.RLock()
	e := c.m[id]
	c.mu.RUnlock()
	if e == nil || !bytes.Equal(e.raw, raw) {
		return Calendar{}, false
	}
	return e.cal, true
}

// put remembers that raw (stored bytes, copied here) decodes to cal.
func (c *calCache) put(id string, raw []byte, cal Calendar) {
	e := &cachedCalendar{raw: bytes.Clone(raw), cal: cal}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]*cachedCalendar)
	}
	if _, ok := c.m[id]; !ok && len(c.m) >= maxCachedCalendars {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[id] = e
}
