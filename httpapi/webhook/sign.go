package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SecretPrefix starts every signing secret (Standard Webhooks' format).
const SecretPrefix = "whsec_"

// secretBytes is the size of a generated key: the HMAC-SHA256 block size
// would allow 64, 32 bytes are as strong as the hash.
const secretBytes = 32

// Signature header names (Standard Webhooks).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// NewSecret returns a fresh random secret: "whsec_" + base64 of 32 bytes.
func NewSecret() (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// secretKey is the HMAC key of a secret: the base64 after "whsec_".
func secretKey(secret string) ([]byte, error) {
	raw, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, errors.New("webhook: secret must start with " + SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(key) == 0 {
		return nil, errors.New("webhook: secret is not base64 after " + SecretPrefix)
	}
	return key, nil
}

// Sign is the signature of one secret: "v1," + base64 HMAC-SHA256 of
// "<id>.<timestamp>.<body>".
func Sign(secret, id string, timestamp int64, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// SignAll is the webhook-signature header value: one signature per secret,
// space-separated (during a rotation the old and the new secret both sign).
func SignAll(secrets []string, id string, timestamp int64, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		sig, err := Sign(s, id, timestamp, body)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}

// Verification errors.
var (
	ErrMissingHeaders = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrTimestamp      = errors.New("webhook: timestamp outside the tolerance")
	ErrSignature      = errors.New("webhook: no matching signature")
)

// DefaultTolerance is how far a webhook-timestamp may be from the
// receiver's clock (Standard Webhooks suggests 5 minutes): it limits
// replays of a captured request.
const DefaultTolerance = 5 * time.Minute

// Verify checks a received request as a receiver would: the timestamp is
// within tolerance of now and one of the signatures was made with secret.
// Comparisons are constant time.
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrTimestamp
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrTimestamp
	}
	want, err := Sign(secret, id, sec, body)
	if err != nil {
		return err
	}
	for _, sig := range strings.Fields(sigs) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return ErrSignature
}
