package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
)

// Roles of API keys.
const (
	// RoleBooker may book, cancel and read bookings, calendars and the
	// outcomes of its own requests, optionally only on a list of calendars.
	RoleBooker = "booker"
	// RoleAdmin may do everything: calendar configuration, /v1/admin/*, and
	// all a booker may, on every calendar.
	RoleAdmin = "admin"
	// RolePublishable is a key meant to be shipped to browsers (a booking
	// page): it may only read what a booking page shows (availability, the
	// calendar's page profile) and create, confirm and release holds, only
	// on its listed calendars, only from its origins (CORS) and rate
	// limited per client address. See cors.go.
	RolePublishable = "publishable"
)

// KeySpec is one configured API key. The key itself is never configured:
// only its SHA-256, so a leaked configuration does not leak keys.
type KeySpec struct {
	// Name identifies the key in logs and metrics (never the key itself).
	Name string `json:"name"`
	Role string `json:"role"`
	// SHA256 is the hex SHA-256 of the key as sent after "Bearer ".
	SHA256 string `json:"sha256"`
	// Calendars limits a booker to these calendar ids; empty = all. A
	// publishable key must list its calendars.
	Calendars []string `json:"calendars,omitempty"`
	// Origins are the web origins ("https://shop.example", scheme, host
	// and port only) whose pages may use a publishable key across origins;
	// empty = only bookline's own /book pages. Publishable keys only.
	Origins []string `json:"origins,omitempty"`
}

// Principal is the authenticated caller of a request.
type Principal struct {
	Name      string
	Role      string
	calendars map[string]bool // nil = every calendar
	origins   map[string]bool // publishable keys: cross-origin pages allowed
}

// mayUseCalendar reports whether p may act on calendar id.
func (p *Principal) mayUseCalendar(id string) bool {
	return p.Role == RoleAdmin || p.calendars == nil || p.calendars[id]
}

type key struct {
	hash [sha256.Size]byte
	p    Principal
}

// Keyring holds the configured API keys. A nil or empty Keyring means the
// API is open (no authentication), which cmd/bookline allows only on a
// loopback address.
type Keyring struct {
	keys []key
}

// HashKey returns the hex SHA-256 of an API key, the form it is configured in.
func HashKey(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:])
}

// NewKeyring checks specs and builds a keyring.
func NewKeyring(specs []KeySpec) (*Keyring, error) {
	kr := &Keyring{}
	names := map[string]bool{}
	hashes := map[string]bool{}
	for i, s := range specs {
		where := fmt.Sprintf("key %d (%q)", i+1, s.Name)
		if s.Name == "" || len(s.Name) > 64 || !actor.ValidCalendarID(s.Name) {
			return nil, fmt.Errorf("%s: name must match [A-Za-z0-9_-]{1,64}", where)
		}
		if names[s.Name] {
			return nil, fmt.Errorf("%s: duplicate name", where)
		}
		names[s.Name] = true
		if s.Role != RoleBooker && s.Role != RoleAdmin && s.Role != RolePublishable {
			return nil, fmt.Errorf("%s: role must be %q, %q or %q", where, RoleBooker, RoleAdmin, RolePublishable)
		}
		if s.Role == RolePublishable && len(s.Calendars) == 0 {
			return nil, fmt.Errorf("%s: a publishable key must list its calendars", where)
		}
		if len(s.Origins) > 0 && s.Role != RolePublishable {
			return nil, fmt.Errorf("%s: origins apply to publishable keys only (other keys must not reach browsers)", where)
		}
		h, err := hex.DecodeString(strings.TrimPrefix(strings.ToLower(s.SHA256), "sha256:"))
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("%s: sha256 must be 64 hex digits (the SHA-256 of the key, see `bookline hash-key`)", where)
		}
		if hashes[string(h)] {
			return nil, fmt.Errorf("%s: the same key is configured twice", where)
		}
		hashes[string(h)] = true
		k := key{p: Principal{Name: s.Name, Role: s.Role}}
		copy(k.hash[:], h)
		if len(s.Calendars) > 0 {
			if s.Role == RoleAdmin {
				return nil, fmt.Errorf("%s: calendars can only limit a booker", where)
			}
			k.p.calendars = map[string]bool{}
			for _, c := range s.Calendars {
				if !actor.ValidCalendarID(c) {
					return nil, fmt.Errorf("%s: calendar %q must match [A-Za-z0-9_-]{1,64}", where, c)
				}
				k.p.calendars[c] = true
			}
		}
		for _, o := range s.Origins {
			norm, err := parseOrigin(o)
			if err != nil {
				return nil, fmt.Errorf("%s: origin %q: %w", where, o, err)
			}
			if k.p.origins == nil {
				k.p.origins = map[string]bool{}
			}
			k.p.origins[norm] = true
		}
		kr.keys = append(kr.keys, k)
	}
	return kr, nil
}

// ParseKeys decodes a JSON array of KeySpec (the keys file's and
// BOOKLINE_API_KEYS's format). Unknown fields are an error.
func ParseKeys(b []byte) ([]KeySpec, error) {
	var specs []KeySpec
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&specs); err != nil {
		return nil, fmt.Errorf("api keys: want a JSON array of {name, role, sha256, calendars, origins}: %w", err)
	}
	return specs, nil
}

// LoadKeysFile reads a keys file (see ParseKeys).
func LoadKeysFile(path string) ([]KeySpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	specs, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return specs, nil
}

// Len is the number of configured keys.
func (kr *Keyring) Len() int {
	if kr == nil {
		return 0
	}
	return len(kr.keys)
}

// Open reports whether the API runs without authentication.
func (kr *Keyring) Open() bool { return kr.Len() == 0 }

// lookup finds the principal of a presented key. Every configured hash is
// compared, in constant time, whatever matches: the time taken does not
// depend on which key (if any) matched nor on how much of a hash did.
func (kr *Keyring) lookup(apiKey string) (*Principal, bool) {
	sum := sha256.Sum256([]byte(apiKey))
	found := -1
	for i := range kr.keys {
		if subtle.ConstantTimeCompare(sum[:], kr.keys[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, false
	}
	return &kr.keys[found].p, true
}

var (
	errUnauthorized = &Error{Code: CodeUnauthorized, Message: "a valid API key is required: Authorization: Bearer <key>"}
	errForbidden    = &Error{Code: CodeForbidden, Message: "this API key may not do this"}
)

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(c *fiber.Ctx) (string, bool) {
	h := c.Get(fiber.HeaderAuthorization)
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// principalKey is the fiber.Ctx local holding the *Principal.
const principalKey = "bookline.principal"

// principal returns the authenticated caller of c (nil when open).
func principal(c *fiber.Ctx) *Principal {
	p, _ := c.Locals(principalKey).(*Principal)
	return p
}

// access is what a route needs.
type access int

const (
	accessPublic access = iota // health, metrics, the spec
	accessBooker               // bookings, reads, request outcomes
	accessAdmin                // calendar configuration, /v1/admin/*
	accessPage                 // what a booking page needs: also publishable keys
)

// authorize is the route middleware that enforces need: 401 without a
// valid key, 403 for the wrong role or a calendar the key is not limited
// to. With no keys configured everything is allowed.
func (s *Server) authorize(need access) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if need == accessPublic || s.keys.Open() {
			return c.Next()
		}
		tok, ok := bearer(c)
		if !ok {
			return errUnauthorized
		}
		p, ok := s.keys.lookup(tok)
		if !ok {
			s.log.Info("authentication failed", "request_id", requestIDOf(c), "ip", s.clientIP(c), "route", c.Route().Path)
			return errUnauthorized
		}
		c.Locals(principalKey, p)
		if need == accessAdmin && p.Role != RoleAdmin || need == accessBooker && p.Role == RolePublishable {
			return errForbidden
		}
		if cal := c.Params("calendarId"); cal != "" && !p.mayUseCalendar(cal) {
			return errForbidden
		}
		if p.Role == RolePublishable {
			if err := s.checkOrigin(c, p); err != nil {
				return err
			}
		} else {
			dropCORS(c) // other keys are not for browsers
		}
		return c.Next()
	}
}

// IsLoopback reports whether a listen address (host:port) binds only
// loopback interfaces. An empty host ("":8080) binds every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ErrOpenNonLoopback is returned when the API would be reachable from other
// machines without authentication.
var ErrOpenNonLoopback = errors.New("no API keys configured: refusing to serve the API open on a non-loopback address (configure --api-keys-file or --api-keys, or bind 127.0.0.1)")
