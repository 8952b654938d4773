package data

import (
	"encoding/json"
	"time"
)

// Pool strategies.
const (
	StrategyLeastRecentlyBooked = "least_recently_booked"
	StrategyWeighted            = "weighted"
)

// Pool is a set of calendars that share incoming bookings (round robin):
// a pool booking goes to one of them, chosen by the pool's writer from
// the pool's record. It lives in its own partition's log, on the subject
// of its pool token (actor.PoolToken), so its record, like a calendar's,
// is a function of that log.
type Pool struct {
	ID          string         `json:"id"`
	CalendarIDs []string       `json:"calendar_ids"`
	Strategy    string         `json:"strategy"`
	Weights     map[string]int `json:"weights,omitempty"`
	// Members are the bookings the pool recorded per calendar.
	Members map[string]PoolMember `json:"members,omitempty"`
	// Order is, in a pool.choose's reply, the order in which to try the
	// calendars; never stored.
	Order     []string  `json:"order,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PoolMember is what a pool recorded of one calendar: how many of its
// bookings went there, and the log sequence of the last one.
type PoolMember struct {
	Bookings int    `json:"bookings"`
	LastSeq  uint64 `json:"last_seq,omitempty"`
}

var bucketPools = []byte("pools") // pool token -> Pool (JSON)

// Pool returns the pool whose token is tok.
func (t *Tx) Pool(tok string) (Pool, error) {
	var p Pool
	b := t.bucket(bucketPools)
	if b == nil {
		return p, ErrNotFound
	}
	v := b.Get([]byte(tok))
	if v == nil {
		return p, ErrNotFound
	}
	if err := json.Unmarshal(v, &p); err != nil {
		return p, ErrCorrupt
	}
	return p, nil
}

// PutPool stores p under its token tok.
func (t *Tx) PutPool(tok string, p Pool) error {
	b, err := t.createBucket(bucketPools)
	if err != nil {
		return err
	}
	p.Order = nil
	v, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return b.Put([]byte(tok), v)
}

// dropPools removes the pools whose tokens belongs accepts (a partition
// being rebuilt).
func (t *Tx) dropPools(belongs func(tok string) bool) error {
	return deleteWhere(t.bucket(bucketPools), func(k []byte) bool { return belongs(string(k)) })
}
