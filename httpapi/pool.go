package httpapi

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Pools (docs/api.md, "Pools"): calendars that share incoming bookings.
// The pool's writer answers the order in which to try them (actor/pool.go);
// the API books (or holds) them in that order, each a booking or hold
// decided by the calendar's own writer, until one accepts, and records the
// choice in the pool's log.

// CodeNoCalendarFree: no calendar of the pool could take the booking.
const CodeNoCalendarFree = "no_calendar_free"

type poolRequest struct {
	CalendarIDs []string       `json:"calendar_ids"`
	Strategy    string         `json:"strategy"`
	Weights     map[string]int `json:"weights"`
}

func (*poolRequest) strictBody() {}

func poolID(c *fiber.Ctx) (string, error) {
	id := c.Params("poolId")
	if !actor.ValidPoolID(id) {
		return "", invalid(actor.FieldError{Field: "poolId", Message: "must match [A-Za-z0-9_-]{1,48}"})
	}
	return id, nil
}

// putPool serves PUT /v1/pools/{poolId} (admin).
func (s *Server) putPool(c *fiber.Ctx) error {
	id, err := poolID(c)
	if err != nil {
		return err
	}
	var req poolRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	reqID, err := requestID(c)
	if err != nil {
		return err
	}
	cmd := &actor.Command{V: actor.CollectiveSchemaVersion, Type: actor.TypePoolUpsert, RequestID: reqID, CalendarID: actor.PoolToken(id),
		Pool: &actor.PoolSpec{ID: id, CalendarIDs: req.CalendarIDs, Strategy: actor.LenientString(req.Strategy), Weights: req.Weights}}
	if cmd.Pool.CalendarIDs == nil {
		cmd.Pool.CalendarIDs = []string{}
	}
	return s.submit(c, cmd)
}

// readPool reads pool id from the index (after catching up with its log in
// cluster mode).
func (s *Server) readPool(c *fiber.Ctx, id string) (data.Pool, error) {
	if err := s.syncRead(c, actor.PoolToken(id)); err != nil {
		return data.Pool{}, err
	}
	var p data.Pool
	err := s.backend.View(func(tx *data.Tx) (err error) {
		p, err = tx.Pool(actor.PoolToken(id))
		return err
	})
	if errors.Is(err, data.ErrNotFound) {
		return p, &Error{Code: actor.CodePoolNotFound, Message: "pool not found"}
	}
	return p, err
}

// getPool serves GET /v1/pools/{poolId}.
func (s *Server) getPool(c *fiber.Ctx) error {
	id, err := poolID(c)
	if err != nil {
		return err
	}
	p, err := s.readPool(c, id)
	if err != nil {
		return err
	}
	return c.JSON(p)
}

// mayUsePool reports whether the caller may use every calendar of p.
func mayUsePool(c *fiber.Ctx, p *data.Pool) error {
	if pr := principal(c); pr != nil {
		for _, id := range p.CalendarIDs {
			if !pr.mayUseCalendar(id) {
				return errForbidden
			}
		}
	}
	return nil
}

// createPoolBooking serves POST /v1/pools/{poolId}/bookings.
func (s *Server) createPoolBooking(c *fiber.Ctx) error {
	id, err := poolID(c)
	if err != nil {
		return err
	}
	var req bookingRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	reqID, err := requestID(c)
	if err != nil {
		return err
	}
	spec, bad := bookingSpec(&req)
	if spec.Recurrence != nil || spec.OnConflict != "" {
		bad = append(bad, actor.FieldError{Field: "recurrence", Message: "a pool booking has no recurrence"})
	}
	if len(bad) > 0 {
		return invalid(bad...)
	}
	return s.placeInPool(c, id, reqID, actor.TypeBookingCreate, spec)
}

// createPoolHold serves POST /v1/pools/{poolId}/holds: a hold on the
// calendar the pool chooses, made as createPoolBooking makes a booking.
// It is confirmed or released through that calendar's hold routes, which
// the answer's calendar_id and hold_secret are for.
func (s *Server) createPoolHold(c *fiber.Ctx) error {
	id, err := poolID(c)
	if err != nil {
		return err
	}
	var req holdRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	reqID, err := requestID(c)
	if err != nil {
		return err
	}
	spec, bad := holdSpec(&req)
	if spec.Recurrence != nil || spec.OnConflict != "" {
		bad = append(bad, actor.FieldError{Field: "recurrence", Message: "a pool hold has no recurrence"})
	}
	if len(bad) > 0 {
		return invalid(bad...)
	}
	return s.placeInPool(c, id, reqID, actor.TypeHoldCreate, spec)
}

// placeInPool runs a pool's choice for a booking or a hold (typ, with
// spec): pool.choose, then typ on each calendar in the order it gives
// until one accepts, then pool.record of that one. The pool counts a hold
// when it is made: whether it is confirmed later is the calendar's
// business, and a hold that lapses still took the calendar's turn, as a
// booking cancelled later does.
func (s *Server) placeInPool(c *fiber.Ctx, id, reqID, typ string, spec *actor.BookingSpec) error {
	p, err := s.readPool(c, id)
	if err != nil {
		return err
	}
	if err := mayUsePool(c, &p); err != nil {
		return err
	}
	// Each calendar tried is a booking or hold decided: the pool costs
	// what its calendars would.
	if err := s.charge(c, len(p.CalendarIDs)); err != nil {
		return err
	}
	ttl := actor.RecordTTLSeconds(s.cfg.KeylessRecordRetention)
	if c.Get("Idempotency-Key") != "" {
		ttl = actor.RecordTTLSeconds(s.cfg.KeyedRecordRetention)
	}
	ctx, cancel := context.WithTimeout(s.withTrace(context.Background(), requestIDOf(c)), s.cfg.ReplyTimeout)
	defer cancel()
	chosen := s.runStep(ctx, []*actor.Command{actor.PoolChooseCommand(id, reqID, ttl)})[0]
	switch {
	case chosen.err != nil:
		return s.stepUnavailable(c, chosen.err)
	case chosen.reply.Outcome != actor.OutcomeAccepted || chosen.reply.Pool == nil:
		return s.writeReply(c, chosen.raw)
	}
	var refusals []actor.FieldError
	for _, cal := range chosen.reply.Pool.Order {
		cmd := &actor.Command{Type: typ, RequestID: reqID, CalendarID: cal, Booking: spec, RecordTTLSeconds: ttl}
		cmd.V = cmd.MinVersion()
		v := s.runStep(ctx, []*actor.Command{cmd})[0]
		if v.err != nil {
			// Whether it was booked is not known: trying the next could
			// book the request twice. A retry with the key finds out.
			return s.stepUnavailable(c, v.err)
		}
		if v.reply.Outcome != actor.OutcomeAccepted {
			refusals = append(refusals, actor.FieldError{Field: cal, Message: v.reply.Code})
			continue
		}
		rec := s.runStep(ctx, []*actor.Command{actor.PoolRecordCommand(id, cal, v.reply.Booking.ID, ttl)})[0]
		if rec.err != nil || rec.reply.Outcome != actor.OutcomeAccepted {
			// The booking stands; only the pool's count of it is late
			// (a retry with the key records it).
			s.log.Warn("a pool booking was not recorded in its pool", "pool", id, "calendar", cal, "type", typ, "err", rec.err, "code", rec.reply.Code)
		}
		return s.writeReply(c, v.raw)
	}
	return &Error{Code: CodeNoCalendarFree, Message: "no calendar of the pool can take this booking; details give each calendar's refusal",
		Details: refusals}
}

// stepUnavailable answers a step of a pool booking whose outcome is not
// known.
func (s *Server) stepUnavailable(c *fiber.Ctx, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	s.log.Warn("a pool booking's step was not answered", "trace_id", requestIDOf(c), "err", err)
	return &Error{Code: CodeUnavailable, Message: "the booking's outcome is not known yet: retry with the same Idempotency-Key"}
}

// poolAvailabilityResponse answers GET /v1/pools/{poolId}/availability:
// the starts at which at least one calendar of the pool is free, each with
// the calendars free then.
type poolAvailabilityResponse struct {
	PoolID      string     `json:"pool_id"`
	CalendarIDs []string   `json:"calendar_ids"`
	Duration    string     `json:"duration"`
	Slots       []poolSlot `json:"slots"`
}

type poolSlot struct {
	Start       time.Time `json:"start"`
	CalendarIDs []string  `json:"calendar_ids"`
}

// poolAvailability is the union of the pool's calendars' availability
// (actor.Availability, the check each writer makes), with the same
// parameters and budget as a calendar's, counted over every calendar.
func (s *Server) poolAvailability(c *fiber.Ctx) error {
	id, err := poolID(c)
	if err != nil {
		return err
	}
	q, err := parseAvailabilityQuery(c)
	if err != nil {
		return err
	}
	p, err := s.readPool(c, id)
	if err != nil {
		return err
	}
	if err := mayUsePool(c, &p); err != nil {
		return err
	}
	resp := poolAvailabilityResponse{PoolID: id, CalendarIDs: p.CalendarIDs, Duration: q.duration.String(), Slots: []poolSlot{}}
	free := map[int64][]string{}
	err = s.availabilityOf(c, p.CalendarIDs, q, func(_ int, cal string, slots []actor.BookableStart) {
		for _, sl := range slots {
			k := sl.Start.UnixNano()
			free[k] = append(free[k], cal)
		}
	})
	if err != nil {
		return err
	}
	for k, cals := range free {
		resp.Slots = append(resp.Slots, poolSlot{Start: time.Unix(0, k).UTC(), CalendarIDs: cals})
	}
	slices.SortFunc(resp.Slots, func(a, b poolSlot) int { return a.Start.Compare(b.Start) })
	return c.JSON(resp)
}

// poolStatus is the status of a pool.upsert's answer.
func poolStatus(created bool) int {
	if created {
		return http.StatusCreated
	}
	return http.StatusOK
}
