package calendarsync

import (
	"container/list"
	"sync"
)

// etagCacheSize bounds the etags kept in memory: about 100 bytes each, and
// an entry evicted only costs one events.get before the next change of its
// event.
const etagCacheSize = 10000

// eventKey names a Google event: the Google calendar and the event id.
type eventKey struct{ calendar, event string }

// etagCache remembers, per Google event, the etag of the last successful
// answer about it, so that the next conditional change needs no events.get
// first. It is only an optimisation: a missing entry means "read the event
// first", never "write unconditionally". Least recently used entries go
// first.
type etagCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *etagEntry, most recently used first
	byKey map[eventKey]*list.Element
}

type etagEntry struct {
	key  eventKey
	etag string
}

func newEtagCache(max int) *etagCache {
	return &etagCache{max: max, order: list.New(), byKey: map[eventKey]*list.Element{}}
}

func (c *etagCache) get(k eventKey) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.byKey[k]
	if el == nil {
		return "", false
	}
	c.order.MoveToFront(el)
	return el.Value.(*etagEntry).etag, true
}

// put records etag as event k's current one; an empty etag (an answer
// without one) forgets it.
func (c *etagCache) put(k eventKey, etag string) {
	if etag == "" {
		c.forget(k)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.byKey[k]; el != nil {
		el.Value.(*etagEntry).etag = etag
		c.order.MoveToFront(el)
		return
	}
	c.byKey[k] = c.order.PushFront(&etagEntry{key: k, etag: etag})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*etagEntry).key)
	}
}

func (c *etagCache) forget(k eventKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.byKey[k]; el != nil {
		c.order.Remove(el)
		delete(c.byKey, k)
	}
}

func (c *etagCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
