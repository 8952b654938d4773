// Package secretkey keeps bookline's secrets key: 32 random bytes in a file
// beside the index that only its owner may read. Everything bookline must
// keep secret but store where others can copy it (the NATS KV buckets, the
// streams, snapshots) is sealed with it, so a copy of those leaks nothing;
// and values that a stranger must not be able to make up (a hold's
// secret) are MACs under it.
//
// Instances that share a NATS cluster must share the key: what one seals
// the others open. The key's id (KeyID) is public and names the key a
// sealed value needs, so a mismatch is found and reported instead of
// failing as a bad signature.
//
// Imports: only the standard library and data (for durable file writes).
package secretkey

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/bookline/bookline/data"
)

// Size is the key's length in bytes.
const Size = 32

// FileName is the key file's name inside a data directory.
const FileName = "secrets.key"

// sealPrefix starts every sealed value: the format's version, then the
// key id, then base64url(nonce || AES-256-GCM ciphertext).
const sealPrefix = "sealed1."

// Errors.
var (
	// ErrMode: the key file may be read by group or others.
	ErrMode = errors.New("secretkey: the key file must be readable by its owner only (chmod 600)")
	// ErrWrongKey: a value was sealed with another key.
	ErrWrongKey = errors.New("secretkey: sealed with another key")
	// ErrNotSealed: a value is not in the sealed format.
	ErrNotSealed = errors.New("secretkey: not a sealed value")
	// ErrCorrupt: a sealed value does not open (altered, or sealed for
	// another place).
	ErrCorrupt = errors.New("secretkey: sealed value does not open")
)

// Key is a loaded secrets key.
type Key struct {
	id   string
	aead cipher.AEAD
	mac  []byte // the MAC sub-key
}

// LoadOrCreate reads the key at path, making it (0600, durably, once even
// if two processes start together) when it does not exist.
func LoadOrCreate(path string) (*Key, error) {
	k, err := Load(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	raw := make([]byte, Size)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	switch err := data.WriteFileExclusive(path, []byte(hex.EncodeToString(raw)+"\n"), 0o600); {
	case errors.Is(err, fs.ErrExist):
		return Load(path)
	case err != nil:
		return nil, fmt.Errorf("secretkey: %w", err)
	}
	return New(raw)
}

// Load reads the key at path: 64 hex digits (white space around them is
// ignored). A file that group or others may read is refused.
func Load(path string) (*Key, error) {
	b, err := data.ReadPrivateFile(path, 4*Size)
	if errors.Is(err, data.ErrNotPrivate) {
		return nil, fmt.Errorf("%w: %v", ErrMode, err)
	}
	if err != nil {
		return nil, err
	}
	raw, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != Size {
		return nil, fmt.Errorf("secretkey: %s must hold %d hex digits", path, 2*Size)
	}
	return New(raw)
}

// New makes a key of raw bytes (Size of them).
func New(raw []byte) (*Key, error) {
	if len(raw) != Size {
		return nil, fmt.Errorf("secretkey: want %d bytes, got %d", Size, len(raw))
	}
	derive := func(label string) []byte {
		b, err := hkdf.Key(sha256.New, raw, nil, "bookline "+label, Size)
		if err != nil {
			panic(err) // only for lengths hkdf cannot give
		}
		return b
	}
	block, err := aes.NewCipher(derive("seal v1"))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Key{id: hex.EncodeToString(derive("key id")[:8]), aead: aead, mac: derive("mac v1")}, nil
}

// ID names the key without revealing it.
func (k *Key) ID() string { return k.id }

// Seal encrypts plain for the place where (for instance "webhook:<id>"):
// the value opens only with this key and only for the same place, so a
// sealed value copied to another record does not open there.
func (k *Key) Seal(plain []byte, where string) (string, error) {
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(plain)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	sealed := k.aead.Seal(nonce, nonce, plain, []byte(where))
	return sealPrefix + k.id + "." + base64.RawURLEncoding.EncodeToString(sealed), nil
}

// Open decrypts a value Seal made for where.
func (k *Key) Open(value, where string) ([]byte, error) {
	rest, ok := strings.CutPrefix(value, sealPrefix)
	if !ok {
		return nil, ErrNotSealed
	}
	id, body, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, ErrNotSealed
	}
	if id != k.id {
		return nil, fmt.Errorf("%w: %s (this key is %s)", ErrWrongKey, id, k.id)
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(b) < k.aead.NonceSize() {
		return nil, ErrCorrupt
	}
	plain, err := k.aead.Open(nil, b[:k.aead.NonceSize()], b[k.aead.NonceSize():], []byte(where))
	if err != nil {
		return nil, ErrCorrupt
	}
	return plain, nil
}

// IsSealed reports whether value is in the sealed format.
func IsSealed(value string) bool { return strings.HasPrefix(value, sealPrefix) }

// SealedKeyID is the id of the key value was sealed with ("" if value is
// not sealed).
func SealedKeyID(value string) string {
	rest, ok := strings.CutPrefix(value, sealPrefix)
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ".")
	return id
}

// MAC is HMAC-SHA256 under the key's MAC sub-key of purpose and the parts
// (each length-prefixed, so ("ab","c") and ("a","bc") differ).
func (k *Key) MAC(purpose string, parts ...string) []byte {
	h := hmac.New(sha256.New, k.mac)
	for _, p := range append([]string{purpose}, parts...) {
		var n [4]byte
		n[0], n[1], n[2], n[3] = byte(len(p)>>24), byte(len(p)>>16), byte(len(p)>>8), byte(len(p))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}
