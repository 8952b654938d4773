package httpapi

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

// Ids that strangers see or send back are made from crypto/rand, never
// from a counter: a request id without an Idempotency-Key names the
// request's outcome and, hashed, the hold or booking it makes, and an
// X-Request-Id shown in every answer must tell nothing about the ids of
// other answers. (A NUID, as used before, is a random prefix and a
// counter: two answers gave away the counter's prefix and step.)

// randomIDBytes is the randomness of one id: 128 bits.
const randomIDBytes = 16

var idEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)

// randomBytes fills b from crypto/rand.
func randomBytes(b []byte) {
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand.Read does not fail (Go 1.24 and later)
	}
}

// randomID is 128 random bits as 26 lower-case base32hex characters.
func randomID() string {
	var b [randomIDBytes]byte
	randomBytes(b[:])
	return strings.ToLower(idEncoding.EncodeToString(b[:]))
}
