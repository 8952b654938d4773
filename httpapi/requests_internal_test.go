package httpapi

import (
	"net/http/httptest"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// TestRequestIDsAreMadeFor: every id requestID makes for a key is one
// madeFor accepts for that key (and for no other), with and without an
// Idempotency-Key, so the outcome URL of a real request is never refused
// for its shape.
func TestRequestIDsAreMadeFor(t *testing.T) {
	var ids []string
	app := fiber.New()
	app.Get("/", func(c *fiber.Ctx) error {
		c.Locals(principalKey, &Principal{Name: "web-1", Role: RoleBooker})
		id, err := requestID(c)
		if err != nil {
			return err
		}
		ids = append(ids, id)
		return nil
	})
	for i := range 200 {
		req := httptest.NewRequest("GET", "/", nil)
		if i%2 == 0 {
			req.Header.Set("Idempotency-Key", "order-"+string(rune('a'+i%26))+"~!")
		}
		resp, err := app.Test(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("requestID: %v %v", resp, err)
		}
	}
	for _, id := range ids {
		if !madeFor(id, "web-1") {
			t.Errorf("requestID made %q, which madeFor refuses", id)
		}
		if madeFor(id, "web") || madeFor(id, "web-1.x") {
			t.Errorf("%q is taken for another key's", id)
		}
	}
}
