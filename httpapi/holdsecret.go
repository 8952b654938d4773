package httpapi

import (
	"bytes"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/data/secretkey"
)

// HeaderHoldSecret carries a hold's secret on confirm and release.
const HeaderHoldSecret = "Hold-Secret"

// A hold's secret is what lets the page that made the hold, and nobody
// else with the same publishable key, confirm or release it. A
// publishable key is public: every visitor of a booking page has it, so
// the key does not tell visitors apart, and a hold id, though it cannot be
// guessed, is a name, not a proof. The secret is a MAC of the calendar and
// the hold id under the secrets key: nothing is stored, the same hold
// always has the same secret (a retry with the same Idempotency-Key gets
// it again), every instance sharing the key checks it the same way, and
// it is checked before anything is looked up, so a wrong secret answers
// like a hold that does not exist.
const holdSecretBytes = 16

// holdSecret is the secret of hold id on calendar cal.
func (s *Server) holdSecret(cal, id string) string {
	return base64.RawURLEncoding.EncodeToString(s.secrets.MAC("hold", cal, id)[:holdSecretBytes])
}

// holdSecretOK reports whether c may change hold id of cal: admin and
// booker keys may (a booker key only on its calendars, which authorize
// checked), and so may every caller of an API without keys; a
// publishable key must show the hold's secret.
func (s *Server) holdSecretOK(c *fiber.Ctx, cal, id string) bool {
	p := principal(c)
	if p == nil || p.Role != RolePublishable {
		return true
	}
	got := c.Get(HeaderHoldSecret)
	return len(got) > 0 && subtle.ConstantTimeCompare([]byte(got), []byte(s.holdSecret(cal, id))) == 1
}

// withHoldSecret adds "hold_secret" to the JSON body of an accepted
// hold.create: the one place its maker learns it.
func (s *Server) withHoldSecret(body []byte) []byte {
	var h struct {
		ID         string `json:"id"`
		CalendarID string `json:"calendar_id"`
	}
	end := bytes.LastIndexByte(body, '}')
	if end < 0 || json.Unmarshal(body, &h) != nil || h.ID == "" || h.CalendarID == "" {
		return body
	}
	out := make([]byte, 0, len(body)+64)
	out = append(out, body[:end]...)
	out = append(out, `,"hold_secret":"`...)
	out = append(out, s.holdSecret(h.CalendarID, h.ID)...)
	return append(append(out, `"`...), body[end:]...)
}

// newEphemeralKey is the secrets key of a server configured without one
// (tests, embedders): hold secrets then hold for this process only.
func newEphemeralKey() *secretkey.Key {
	raw := make([]byte, secretkey.Size)
	randomBytes(raw)
	k, err := secretkey.New(raw)
	if err != nil {
		panic(err)
	}
	return k
}
