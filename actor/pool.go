package actor

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/bookline/bookline/data"
)

// Pools (schema version 4, with collectives): calendars that share
// incoming bookings, one of them chosen per booking. A pool's record lives
// on its own subject token (PoolToken), so one writer decides everything
// about it in log order:
//
//   - pool.upsert sets the calendars, the strategy and the weights;
//   - pool.choose answers the order in which a booking should try the
//     calendars, computed from the record (recorded under the booking's
//     request id, so a retry gets the same order);
//   - pool.record counts a booking made on the chosen calendar.
//
// Between choose and record the API books the calendars in that order,
// each a booking.create decided by the calendar's own writer: the first
// that accepts is the choice. Two requests for one slot therefore go to
// different calendars (the second finds the first's booking and moves on),
// and every step is in some partition's log, so a replay makes the same
// choices.

// Command types of pools (schema version 4).
const (
	TypePoolUpsert = "pool.upsert"
	TypePoolChoose = "pool.choose"
	TypePoolRecord = "pool.record"
)

// CodePoolNotFound: the pool was never upserted.
const CodePoolNotFound = "pool_not_found"

// Limits of a pool.
const (
	MaxPoolMembers = 64
	MaxPoolWeight  = 1000
)

// PoolTokenPrefix starts a pool's subject token; it is within the
// calendar ids reserved for bookline (queue.SystemTokenPrefix).
const PoolTokenPrefix = "_bookline-pool-"

// PoolToken is the subject token (the commands' calendar_id) of pool id.
func PoolToken(id string) string { return PoolTokenPrefix + id }

// ValidPoolID reports whether id is a valid pool id: ^[A-Za-z0-9_-]{1,48}$
// (its token is a calendar id).
func ValidPoolID(id string) bool {
	return validIDBytes(id, 48, func(b byte) bool { return isAlnum(b) || b == '_' || b == '-' })
}

// PoolRecordRequestID is the request id of the pool.record of the booking
// bookingID: one record per booking.
func PoolRecordRequestID(bookingID string) string { return "pool.record." + bookingID }

// PoolSpec is the pool member of the pool.* commands.
type PoolSpec struct {
	ID          string         `json:"id"`
	CalendarIDs []string       `json:"calendar_ids,omitempty"`
	Strategy    LenientString  `json:"strategy,omitempty"`
	Weights     map[string]int `json:"weights,omitempty"`
	// Chosen and BookingID are pool.record's: the calendar the booking
	// went to, and the booking.
	Chosen    string `json:"chosen,omitempty"`
	BookingID string `json:"booking_id,omitempty"`
	bad       bool
}

// UnmarshalJSON reads the pool member and never fails, for the reasons
// CollectiveSpec's does.
func (s *PoolSpec) UnmarshalJSON(b []byte) error {
	type plain PoolSpec // its fields, without this method
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		*s = PoolSpec{bad: true}
		return nil
	}
	*s = PoolSpec(v)
	return nil
}

func isPoolType(t string) bool {
	return t == TypePoolUpsert || t == TypePoolChoose || t == TypePoolRecord
}

// validatePool checks a command of version 4 for its pool member (and
// normalises it: calendars sorted, the default strategy).
func (c *Command) validatePool() []FieldError {
	var errs []FieldError
	add := func(f, m string) { errs = append(errs, FieldError{Field: f, Message: m}) }
	if !isPoolType(c.Type) {
		if c.Pool != nil {
			add("pool", "only the pool.* commands have a pool")
		}
		return errs
	}
	s := c.Pool
	if s == nil || s.bad {
		add("pool", "must be an object with an id")
		return errs
	}
	if !ValidPoolID(s.ID) {
		add("pool.id", "must match [A-Za-z0-9_-]{1,48}")
	} else if c.CalendarID != PoolToken(s.ID) {
		add("calendar_id", "must be the pool's token, "+PoolTokenPrefix+"<pool id>")
	}
	upsert := c.Type == TypePoolUpsert
	if !upsert && (s.CalendarIDs != nil || s.Strategy != "" || s.Weights != nil) {
		add("pool", "only pool.upsert has calendar_ids, strategy and weights")
	}
	if c.Type != TypePoolRecord && (s.Chosen != "" || s.BookingID != "") {
		add("pool", "only pool.record has chosen and booking_id")
	}
	switch c.Type {
	case TypePoolUpsert:
		n := len(s.CalendarIDs)
		if n < 1 || n > MaxPoolMembers {
			add("pool.calendar_ids", fmt.Sprintf("must list 1 to %d calendars", MaxPoolMembers))
		}
		for _, id := range s.CalendarIDs {
			if !ValidCalendarID(id) {
				add("pool.calendar_ids", "must be calendar ids ([A-Za-z0-9_-]{1,64})")
				break
			}
		}
		slices.Sort(s.CalendarIDs)
		if len(slices.Compact(slices.Clone(s.CalendarIDs))) != n {
			add("pool.calendar_ids", "must not list a calendar twice")
		}
		switch s.Strategy {
		case "":
			s.Strategy = data.StrategyLeastRecentlyBooked
		case data.StrategyLeastRecentlyBooked, data.StrategyWeighted:
		default:
			add("pool.strategy", "must be least_recently_booked or weighted")
		}
		for id, w := range s.Weights {
			if !slices.Contains(s.CalendarIDs, id) {
				add("pool.weights", fmt.Sprintf("%q is not one of calendar_ids", id))
			}
			if w < 1 || w > MaxPoolWeight {
				add("pool.weights", fmt.Sprintf("must be from 1 to %d", MaxPoolWeight))
			}
		}
	case TypePoolRecord:
		switch {
		case !ValidCalendarID(s.Chosen):
			add("pool.chosen", "must be a calendar id")
		case !ValidBookingID(s.BookingID):
			add("pool.booking_id", "is not a booking id")
		case c.RequestID != PoolRecordRequestID(s.BookingID):
			add("request_id", "must be pool.record.<booking id>")
		}
	}
	if c.Booking != nil {
		add("booking", "a pool command has no booking")
	}
	return errs
}

// upsertPool decides a pool.upsert: the pool's calendars, strategy and
// weights from now on; what it recorded of calendars it keeps stays.
func upsertPool(tx *data.Tx, d *Decoded) (Reply, error) {
	s := d.Cmd.Pool
	p, err := tx.Pool(d.Cmd.CalendarID)
	created := errors.Is(err, data.ErrNotFound)
	if err != nil && !created {
		return Reply{}, err
	}
	if created {
		p = data.Pool{ID: s.ID, CreatedAt: d.At}
	}
	p.CalendarIDs = slices.Clone(s.CalendarIDs)
	p.Strategy = string(s.Strategy)
	p.Weights = nil
	if len(s.Weights) > 0 {
		p.Weights = make(map[string]int, len(s.Weights))
		for id, w := range s.Weights {
			p.Weights[id] = w
		}
	}
	p.UpdatedAt = d.At
	if err := tx.PutPool(d.Cmd.CalendarID, p); err != nil {
		return Reply{}, err
	}
	r := d.accept()
	r.Created, r.Pool = created, &p
	return r, nil
}

// poolFor loads the command's pool, or its refusal.
func poolFor(tx *data.Tx, d *Decoded) (p data.Pool, rej *Reply, err error) {
	p, err = tx.Pool(d.Cmd.CalendarID)
	if errors.Is(err, data.ErrNotFound) {
		r := d.reject(CodePoolNotFound, "pool not found")
		return p, &r, nil
	}
	return p, nil, err
}

// choosePool decides a pool.choose: the pool with the order in which to
// try its calendars.
func choosePool(tx *data.Tx, d *Decoded) (Reply, error) {
	p, rej, err := poolFor(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	p.Order = PoolOrder(&p)
	r := d.accept()
	r.Pool = &p
	return r, nil
}

// recordPool decides a pool.record: one more booking on the chosen
// calendar, the latest.
func recordPool(tx *data.Tx, d *Decoded) (Reply, error) {
	p, rej, err := poolFor(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	s := d.Cmd.Pool
	r := d.accept()
	if !slices.Contains(p.CalendarIDs, s.Chosen) {
		// The pool changed since the choice: nothing to count.
		r.Message = "the calendar is not in the pool any more: not counted"
		r.Pool = &p
		return r, nil
	}
	if p.Members == nil {
		p.Members = map[string]data.PoolMember{}
	}
	m := p.Members[s.Chosen]
	m.Bookings++
	m.LastSeq = d.Seq
	p.Members[s.Chosen] = m
	if err := tx.PutPool(d.Cmd.CalendarID, p); err != nil {
		return Reply{}, err
	}
	r.Pool = &p
	return r, nil
}

// PoolOrder is the order in which a booking of pool p tries its
// calendars, a function of the pool's record alone:
//
//   - least_recently_booked: the calendar whose last recorded booking is
//     oldest first (never booked before any), then fewer bookings, then id;
//   - weighted: the lowest bookings/weight first (weight 1 when not
//     given), so that over many bookings each calendar's share is its
//     weight's; then the higher weight, then id.
func PoolOrder(p *data.Pool) []string {
	order := slices.Clone(p.CalendarIDs)
	weight := func(id string) int {
		if w := p.Weights[id]; w > 0 {
			return w
		}
		return 1
	}
	slices.SortFunc(order, func(a, b string) int {
		ma, mb := p.Members[a], p.Members[b]
		if p.Strategy == data.StrategyWeighted {
			// ma/wa < mb/wb, without division.
			if x, y := ma.Bookings*weight(b), mb.Bookings*weight(a); x != y {
				return x - y
			}
			if wa, wb := weight(a), weight(b); wa != wb {
				return wb - wa
			}
			return strings.Compare(a, b)
		}
		switch {
		case ma.LastSeq != mb.LastSeq:
			if ma.LastSeq < mb.LastSeq {
				return -1
			}
			return 1
		case ma.Bookings != mb.Bookings:
			return ma.Bookings - mb.Bookings
		}
		return strings.Compare(a, b)
	})
	return order
}

// PoolChooseCommand is the pool.choose of the pool booking reqID.
func PoolChooseCommand(poolID, reqID string, recordTTL int) *Command {
	return &Command{V: CollectiveSchemaVersion, Type: TypePoolChoose, RequestID: reqID, CalendarID: PoolToken(poolID),
		RecordTTLSeconds: recordTTL, Pool: &PoolSpec{ID: poolID}}
}

// PoolRecordCommand is the pool.record of booking bookingID on chosen.
func PoolRecordCommand(poolID, chosen, bookingID string, recordTTL int) *Command {
	return &Command{V: CollectiveSchemaVersion, Type: TypePoolRecord, RequestID: PoolRecordRequestID(bookingID),
		CalendarID: PoolToken(poolID), RecordTTLSeconds: recordTTL, Pool: &PoolSpec{ID: poolID, Chosen: chosen, BookingID: bookingID}}
}
