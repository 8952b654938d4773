package httpapi

import (
	"errors"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
)

// Cross-origin use of the API is for publishable keys only: a booking page
// on another site (the <bookline-booking> component) calls bookline from
// the visitor's browser. The browser asks first (a CORS preflight, which
// carries no Authorization header), so the preflight is allowed when some
// publishable key of the path's calendar lists the page's origin; the
// request itself is then checked against its own key's origins. Other keys
// never get CORS headers: a booker or admin key has no business in a
// browser, so browsers keep refusing to show their answers to other sites.
//
// Credentials (cookies) are never involved: the key travels in the
// Authorization header, Access-Control-Allow-Credentials is never sent and
// the allowed origin is always echoed exactly, never "*".

// corsMethods and corsHeaders are what a booking page sends.
const (
	corsMethods       = "GET, POST, DELETE"
	corsHeaders       = "Authorization, Content-Type, Idempotency-Key, X-Request-Id, Hold-Secret"
	corsExposeHeaders = "Retry-After, X-Request-Id, Location"
	corsMaxAge        = "600"
)

var errOriginNotAllowed = &Error{Code: CodeForbidden, Message: "this key may not be used from this origin (see the key's origins)"}

// parseOrigin checks and normalises a configured origin: scheme http or
// https, a host, an optional port, nothing else (no path, no wildcard).
func parseOrigin(o string) (string, error) {
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return "", err
	case u.Scheme != "http" && u.Scheme != "https":
		return "", errors.New("scheme must be http or https")
	case u.Host == "" || u.Hostname() == "" || strings.Contains(u.Host, "*"):
		return "", errors.New("want scheme://host[:port] without wildcards")
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return "", errors.New("want scheme://host[:port] only, no user, path, query or fragment")
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// sameOrigin reports whether origin is bookline's own origin as the
// browser reached it (the Host it sent): the /book pages.
func sameOrigin(c *fiber.Ctx, origin string) bool {
	return strings.EqualFold(origin, c.Protocol()+"://"+c.Hostname())
}

// pageOrigin reports whether some publishable key of calendar cal lists
// origin (already normalised by the browser: lower case, no path).
func (kr *Keyring) pageOrigin(cal, origin string) bool {
	if kr == nil {
		return false
	}
	origin = strings.ToLower(origin)
	for i := range kr.keys {
		p := &kr.keys[i].p
		if p.Role == RolePublishable && p.calendars[cal] && p.origins[origin] {
			return true
		}
	}
	return false
}

// pathCalendar is the calendar id of a /v1/calendars/{id}/... path, "" for
// any other path. The CORS middleware runs before routing, so Params are
// not there yet.
func pathCalendar(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/calendars/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	if !actor.ValidCalendarID(id) {
		return ""
	}
	return id
}

// cors answers preflights and sets the CORS headers of an answer to a page
// origin some publishable key of the calendar allows. Without keys (an open
// API on loopback) there is no cross-origin use at all.
func (s *Server) cors(c *fiber.Ctx) error {
	origin := c.Get(fiber.HeaderOrigin)
	if origin == "" || s.keys.Open() || sameOrigin(c, origin) {
		return c.Next()
	}
	c.Vary(fiber.HeaderOrigin)
	allowed := s.keys.pageOrigin(pathCalendar(c.Path()), origin)
	if c.Method() == fiber.MethodOptions && c.Get(fiber.HeaderAccessControlRequestMethod) != "" {
		if !allowed {
			return errOriginNotAllowed
		}
		c.Set(fiber.HeaderAccessControlAllowOrigin, origin)
		c.Set(fiber.HeaderAccessControlAllowMethods, corsMethods)
		c.Set(fiber.HeaderAccessControlAllowHeaders, corsHeaders)
		c.Set(fiber.HeaderAccessControlMaxAge, corsMaxAge)
		return c.SendStatus(fiber.StatusNoContent)
	}
	if allowed {
		// Set before the route runs, so that its errors (401, 429, 409)
		// are readable by the page too.
		c.Set(fiber.HeaderAccessControlAllowOrigin, origin)
		c.Set(fiber.HeaderAccessControlExposeHeaders, corsExposeHeaders)
	}
	return c.Next()
}

// checkOrigin refuses a publishable key sent from a page whose origin the
// key does not list. A request without Origin is not from a page script
// (or from the same origin): the origin binding keeps other sites from
// using the key in their visitors' browsers, it is no authentication.
func (s *Server) checkOrigin(c *fiber.Ctx, p *Principal) error {
	origin := c.Get(fiber.HeaderOrigin)
	if origin == "" || sameOrigin(c, origin) || p.origins[strings.ToLower(origin)] {
		return nil
	}
	dropCORS(c)
	return errOriginNotAllowed
}

// dropCORS takes back the CORS headers cors set before the key was known.
func dropCORS(c *fiber.Ctx) {
	c.Response().Header.Del(fiber.HeaderAccessControlAllowOrigin)
	c.Response().Header.Del(fiber.HeaderAccessControlExposeHeaders)
}
