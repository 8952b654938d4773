package httpapi

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
)

// Cost budgets. Every request takes one token from its caller's bucket
// (rateLimit); a read whose work grows with its parameters takes more, in
// proportion to the most work those parameters allow, before that work
// starts. A request never takes more than a bucket holds (its burst): the
// largest one needs a full bucket. docs/api.md, "Cost budgets", lists them.
const (
	// AvailabilityStartsPerToken: an availability query costs a token per
	// this many candidate starts (at least one): a day at the default
	// 15-minute step (96) costs 1, the largest query (6,000) 60.
	AvailabilityStartsPerToken = 100
	// ListBookingsPerToken: a booking list costs a token per this many
	// bookings of its page size: the default page (100) costs 1, the
	// largest (1000) 10.
	ListBookingsPerToken = 100
	// SeriesOccurrencesPerToken: a recurring series costs a token per this
	// many occurrences it may make: a weekly series of ten costs 1, the
	// largest (366) 37.
	SeriesOccurrencesPerToken = 10
)

// costOf is the tokens of work units at perToken units a token, at least 1.
func costOf(units, perToken int) int {
	return max(1, (units+perToken-1)/perToken)
}

// charge makes the request cost cost tokens in all: it takes from the
// caller's bucket what rateLimit (one token) did not. It answers 429
// rate_limited with Retry-After when the bucket does not hold them; the
// token already taken stays taken.
func (s *Server) charge(c *fiber.Ctx, cost int) error { return s.take(c, cost, 1) }

// take takes cost tokens, less the taken already, from the caller's
// bucket: with a publishable key the client address's, otherwise the API
// key's. A cost above the bucket's burst counts as the burst.
func (s *Server) take(c *fiber.Ctx, cost, taken int) error {
	p := principal(c)
	l, who, page := s.limiter, "", false
	switch {
	case p != nil && p.Role == RolePublishable:
		l, who, page = s.pageLimiter, "ip:"+s.clientIP(c), true
	case p != nil:
		who = "key:" + p.Name
	}
	// Without keys the API only runs on loopback, where every client has
	// the same address: limiting by address there would only throttle
	// local tools (importers' checks, load tests).
	if l == nil || who == "" {
		return nil
	}
	cost = min(cost, l.burst)
	if cost-taken <= 0 {
		return nil
	}
	ok, wait := l.allowN(who, cost-taken)
	if ok {
		return nil
	}
	c.Set(fiber.HeaderRetryAfter, strconv.Itoa(retryAfterSeconds(wait)))
	costs := ""
	if cost > 1 {
		costs = fmt.Sprintf("; this request costs %d", cost)
	}
	if page {
		return &Error{Code: CodeRateLimited, Message: fmt.Sprintf("too many requests from this address: at most %g per second (burst %d)%s; retry later",
			float64(l.rate), l.burst, costs)}
	}
	return &Error{Code: CodeRateLimited, Message: fmt.Sprintf("too many requests: at most %g per second (burst %g)%s; retry later",
		float64(l.rate), float64(l.burst), costs)}
}

// startSweep waits, up to the reply timeout, until fewer availability
// queries than Config.AvailabilitySweeps hold a slot, and takes one until
// release. Each query is bounded, but many at once could still take every
// core from the writers; waiting costs no CPU. release keeps the slot for
// as long again as the query took (the answer goes out at once), so
// queries use at most half the time of their slots, whoever sends them.
func (s *Server) startSweep() (release func(), err error) {
	began := time.Now()
	release = func() {
		if took := time.Since(began); took > 0 {
			time.AfterFunc(took, func() { <-s.sweeps })
			return
		}
		<-s.sweeps
	}
	select {
	case s.sweeps <- struct{}{}:
		return release, nil
	default:
	}
	t := time.NewTimer(s.cfg.ReplyTimeout)
	defer t.Stop()
	select {
	case s.sweeps <- struct{}{}:
		began = time.Now()
		return release, nil
	case <-t.C:
		return nil, &Error{Code: CodeUnavailable, Message: "too many availability queries at once; retry later"}
	}
}

// availabilityCost is the tokens an availability query of n candidate
// starts takes.
func availabilityCost(n int) int { return costOf(n, AvailabilityStartsPerToken) }

// tooManyStarts is the answer to an availability range that holds more
// candidate starts than actor.MaxAvailabilityCandidates.
func tooManyStarts(n int, grid time.Duration, own bool) *Error {
	whose, fix := "a", "shorten the range or ask for a larger step"
	if own {
		whose, fix = "the calendar's", "shorten the range (the calendar's slot_step_minutes sets the grid)"
	}
	return &Error{Code: CodeRangeTooLarge,
		Message: fmt.Sprintf("from..to holds %d candidate starts on %s %d-minute grid; at most %d ((to - from) / step, rounded up): %s",
			n, whose, grid/time.Minute, actor.MaxAvailabilityCandidates, fix),
		Details: []actor.FieldError{{Field: "to", Message: fmt.Sprintf("must be at most %d steps after from", actor.MaxAvailabilityCandidates)}}}
}

// ParseTrustedProxies parses --trusted-proxies: addresses and CIDR
// prefixes separated by commas ("10.0.0.1, 192.168.0.0/16, ::1").
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if strings.Contains(f, "/") {
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %v", f, err)
			}
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: not an IP address or CIDR prefix", f)
		}
		a = a.Unmap().WithZone("")
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func (s *Server) trustedProxy(a netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientIP is the address of the client a request comes from: the socket's
// peer, unless the peer is a trusted proxy (Config.TrustedProxies). Then
// X-Forwarded-For is read from the right, the end each proxy appends the
// address it was connected from to, skipping the addresses of trusted
// proxies: the first one that is not trusted is the client (or the first
// untrusted proxy, which is as far as trust reaches). The left part of the
// header is whatever the client sent and proves nothing, so a spoofed
// entry can only stand left of the one our own proxy wrote and is never
// taken. An entry that is not an address ends the walk at the trusted
// proxy that passed it on. Without trusted proxies the header is ignored.
func (s *Server) clientIP(c *fiber.Ctx) string {
	peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	peer = peer.Unmap()
	if len(s.cfg.TrustedProxies) == 0 || !s.trustedProxy(peer) {
		return peer.String()
	}
	client := peer
	lines := c.Request().Header.PeekAll(fiber.HeaderXForwardedFor)
	for i := len(lines) - 1; i >= 0; i-- {
		hops := bytes.Split(lines[i], []byte{','})
		for j := len(hops) - 1; j >= 0; j-- {
			a, ok := parseHop(hops[j])
			if !ok {
				return client.String()
			}
			client = a
			if !s.trustedProxy(a) {
				return a.String()
			}
		}
	}
	return client.String()
}

// parseHop parses one X-Forwarded-For entry: an address, or an address
// with a port (some proxies add it).
func parseHop(b []byte) (netip.Addr, bool) {
	h := strings.TrimSpace(string(b))
	a, err := netip.ParseAddr(h)
	if err != nil {
		ap, err := netip.ParseAddrPort(h)
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.Unmap().WithZone(""), true
}
