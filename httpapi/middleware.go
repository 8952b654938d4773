package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/docs"
)

// HeaderRequestID is the HTTP header carrying a request's id: taken from
// the request when valid, generated otherwise, always set on the answer.
// It travels with the command in NATS as queue.HeaderTraceID.
const HeaderRequestID = "X-Request-Id"

const requestIDKey = "bookline.request_id"

// validRequestIDHeader accepts 1..128 characters of [A-Za-z0-9._:-].
func validRequestIDHeader(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !('a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '.' || ch == '_' || ch == ':' || ch == '-') {
			return false
		}
	}
	return true
}

// requestIDOf returns the request id of c ("" before observe ran, e.g. for
// errors fasthttp raises before routing).
func requestIDOf(c *fiber.Ctx) string {
	id, _ := c.Locals(requestIDKey).(string)
	return id
}

// observe is the outermost middleware: it assigns the request id, answers
// errors through the error handler (so the final status is known), records
// the HTTP metrics by route pattern and writes the access log line.
func (s *Server) observe(c *fiber.Ctx) error {
	began := time.Now()
	// Fiber's strings point into buffers reused after the request: copy
	// what outlives it (metric labels, the id in contexts).
	id := strings.Clone(c.Get(HeaderRequestID))
	if !validRequestIDHeader(id) {
		id = randomID()
	}
	c.Locals(requestIDKey, id)
	c.Set(HeaderRequestID, id)
	err := c.Next()
	route := c.Route().Path
	var fe *fiber.Error
	if errors.As(err, &fe) && (fe.Code == fiber.StatusNotFound || fe.Code == fiber.StatusMethodNotAllowed) {
		route = "unmatched" // not a route pattern: never the raw path
	} else if c.Route().Method == "USE" {
		route = "unmatched"
	}
	if err != nil {
		if herr := s.errorHandler(c, err); herr != nil {
			return herr
		}
	}
	status := c.Response().StatusCode()
	d := time.Since(began)
	method := methodLabel(c.Method())
	s.metrics.observeHTTP(method, route, status, d)
	if s.log.Enabled(c.UserContext(), slog.LevelDebug) {
		key := ""
		if p := principal(c); p != nil {
			key = p.Name
		}
		s.log.Debug("http request", "request_id", id, "method", method, "route", route, "status", status,
			"duration", d, "key", key, "ip", s.clientIP(c))
	}
	return nil
}

// methodLabel returns a constant string for the method (never the
// request's buffer, and a bounded label set).
func methodLabel(m string) string {
	switch m {
	case fiber.MethodGet:
		return fiber.MethodGet
	case fiber.MethodHead:
		return fiber.MethodHead
	case fiber.MethodPost:
		return fiber.MethodPost
	case fiber.MethodPut:
		return fiber.MethodPut
	case fiber.MethodDelete:
		return fiber.MethodDelete
	case fiber.MethodPatch:
		return fiber.MethodPatch
	case fiber.MethodOptions:
		return fiber.MethodOptions
	}
	return "other"
}

// rateLimit takes a token, what every request costs, from the caller's
// bucket (see take). Without a token it answers 429 rate_limited with
// Retry-After.
func (s *Server) rateLimit(c *fiber.Ctx) error {
	if err := s.take(c, 1, 0); err != nil {
		return err
	}
	return c.Next()
}

// OpenAPISpec is the OpenAPI 3 description of this API: docs/openapi.yaml,
// the one copy, embedded by package docs.
var OpenAPISpec = docs.OpenAPI

func (s *Server) openapi(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, "application/yaml")
	return c.Send(OpenAPISpec)
}

// fmtRange prints a duration in days when it is whole days.
func fmtRange(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}
