package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
)

// calendarID returns the path's calendar id or an invalid_request error.
func calendarID(c *fiber.Ctx) (string, error) {
	id := c.Params("calendarId")
	if !actor.ValidCalendarID(id) {
		return "", invalid(actor.FieldError{Field: "calendarId", Message: "must match [A-Za-z0-9_-]{1,64}"})
	}
	return id, nil
}

// Request ids are scoped to the caller that sent them: two API keys that
// send the same Idempotency-Key make two requests, and an outcome is
// readable only by its caller (or an admin key). The caller is part of the
// id, so scoping costs no lookup and survives restarts:
//
//   - with API keys, caller = the key's name: "k.<name>.<h>" for an
//     Idempotency-Key, h = hex(SHA-256(key))[:32], and "r.<name>.<r>"
//     without one, r = 128 bits from crypto/rand (randomID; the command
//     carries the id, so a replay decides the same);
//   - without API keys there is one caller, "open" (every request is
//     its), whose ids keep the form they always had: "k.<h>" and
//     "r.<r>". Open deployments thus keep answering every key they
//     recorded before callers were scoped, with no lookup.
//
// Key names match [A-Za-z0-9_-]{1,64}, so the owner is whatever lies
// between the prefix and the next ".", and ids stay within 128 bytes.

// KeyRequestID is the request id of Idempotency-Key key sent by the API key
// named caller, or, with caller "", by anyone on an API without keys.
func KeyRequestID(caller, key string) string {
	sum := sha256.Sum256([]byte(key))
	if caller == "" {
		return "k." + hex.EncodeToString(sum[:16])
	}
	return "k." + caller + "." + hex.EncodeToString(sum[:16])
}

// requestOwner is the API key name a request id was made for, or "" for
// ids made without API keys (and by versions that did not scope keys),
// by importers and by bookline itself.
func requestOwner(id string) string {
	if len(id) < 2 || (id[:2] != "k." && id[:2] != "r.") {
		return ""
	}
	owner, _, ok := strings.Cut(id[2:], ".")
	if !ok {
		return ""
	}
	return owner
}

// madeFor reports whether id has a shape requestID gives the requests of
// the API key named caller: "k.<caller>.<32 lower-case hex digits>" or
// "r.<caller>.<token>". An id of that caller in any other shape was never
// made by this API, so its outcome is unknown without a lookup.
func madeFor(id, caller string) bool {
	if len(id) < 2 {
		return false
	}
	rest, ok := strings.CutPrefix(id[2:], caller+".")
	if !ok {
		return false
	}
	switch id[:2] {
	case "k.":
		return len(rest) == 32 && strings.Trim(rest, "0123456789abcdef") == ""
	case "r.":
		return keylessToken(rest)
	}
	return false
}

// keylessToken reports whether s can be the unique part of a request id
// made without an Idempotency-Key: 16 to 64 characters of [A-Za-z0-9_-],
// which takes in any random token in hex, base32, base62 or base64url
// that requestID may use (TestRequestIDsAreMadeFor checks it does).
func keylessToken(s string) bool {
	if len(s) < 16 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

// callerOf is the name of c's API key ("" when the API runs without keys).
func callerOf(c *fiber.Ctx) string {
	if p := principal(c); p != nil {
		return p.Name
	}
	return ""
}

// requestID derives the command's request id: from the caller and the
// Idempotency-Key header when present (so every retry maps to the same
// record), otherwise a fresh unique id of the caller.
func requestID(c *fiber.Ctx) (string, error) {
	caller := callerOf(c)
	key := c.Get("Idempotency-Key")
	if key == "" {
		if caller == "" {
			return "r." + randomID(), nil
		}
		return "r." + caller + "." + randomID(), nil
	}
	if len(key) > MaxIdempotencyKey {
		return "", invalid(actor.FieldError{Field: "Idempotency-Key", Message: "must be at most 255 characters"})
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return "", invalid(actor.FieldError{Field: "Idempotency-Key", Message: "must be printable ASCII without spaces"})
		}
	}
	return KeyRequestID(caller, key), nil
}

// writeRequest reads what every write route needs: the calendar id of the
// path, the JSON body into body, and the command's request id.
func writeRequest(c *fiber.Ctx, body any) (cal, reqID string, err error) {
	if cal, err = calendarID(c); err != nil {
		return "", "", err
	}
	if err = decodeBody(c, body); err != nil {
		return "", "", err
	}
	reqID, err = requestID(c)
	return cal, reqID, err
}

// decodeBody decodes a JSON object body into v.
func decodeBody(c *fiber.Ctx, v any) error {
	body := c.Body()
	if len(bytes.TrimSpace(body)) == 0 {
		return invalid(actor.FieldError{Field: "body", Message: "a JSON object is required"})
	}
	if f, ok := v.(fastDecoder); ok {
		if f.decodeFast(body) {
			return nil
		}
		f.reset()
	}
	_, strict := v.(strictBody)
	return decodeJSONWith(body, v, strict)
}

// strictBody is a request body that refuses members it does not define.
type strictBody interface{ strictBody() }

// decodeJSON is decodeBody's encoding/json path.
func decodeJSON(body []byte, v any) error { return decodeJSONWith(body, v, false) }

// decodeJSONWith decodes one JSON object, refusing unknown fields if strict.
// Whatever the route, a body must keep the strict rules (actor.CheckJSON):
// encoding/json would otherwise store invalid UTF-8 replaced and keep the
// last of two keys without a word.
func decodeJSONWith(body []byte, v any, strict bool) error {
	if err := actor.CheckJSON(body); err != nil {
		return invalid(actor.FieldError{Field: "body", Message: "invalid JSON: " + err.Error()})
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok && strict {
			return invalid(actor.FieldError{Field: strings.TrimSuffix(name, `"`),
				Message: "is not a member of this request: bookline does not know it, and nothing was done (docs/api.md, Unknown members)"})
		}
		return invalid(actor.FieldError{Field: "body", Message: "invalid JSON: " + err.Error()})
	}
	if len(bytes.TrimSpace(body[dec.InputOffset():])) > 0 {
		return invalid(actor.FieldError{Field: "body", Message: "trailing data after the JSON object"})
	}
	return nil
}
