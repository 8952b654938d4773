package httpapi

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// referenceBooking decodes body the way decodeBody did before the
// shortcut: encoding/json, then the trailing data check.
func referenceBooking(body []byte) (bookingRequest, error) {
	var r bookingRequest
	err := decodeJSON(body, &r)
	return r, err
}

// checkFastBooking fails t when the shortcut accepts body but encoding/json
// decodes it to something else or refuses it.
func checkFastBooking(t *testing.T, body []byte) (fast bool) {
	t.Helper()
	var got bookingRequest
	if !got.decodeFast(body) {
		return false
	}
	want, err := referenceBooking(body)
	if err != nil {
		t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", body, err)
	}
	if got.Start != want.Start || got.End != want.End || got.Customer != want.Customer ||
		!bytes.Equal(got.Metadata, want.Metadata) || (got.Metadata == nil) != (want.Metadata == nil) {
		t.Fatalf("body %q: fast path %+v, encoding/json %+v", body, got, want)
	}
	return true
}

var (
	bodyStrings = []string{`"2026-12-01T10:00:00Z"`, `"bob"`, `""`, `"é ü"`, `"a\"b"`, `"\u00e9"`, "\"\xff\"", "\"a\tb\"",
		`"}{"`, `"\\"`, `null`, `12`, `true`, `{"a":1}`, `[1]`, `"2026-12-01T10:00:00+01:00"`}
	bodyMetadata = []string{`{}`, `{"room":"3"}`, ` { "a" : [1, {"b": "}"}], "c":"\"{" } `, `{"x":{"y":{"z":null}}}`,
		`null`, `"text"`, `[1,2]`, `{"a":}`, `{"a":1,}`, "{\"k\":\"\xff\"}", strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat(`}`, 70),
		`{"a":"\u0000"}`, `{"k":1e400}`}
	bodyKeys = []string{"start", "end", "customer", "metadata", "Start", "END", "other", "custom\u00e9r", "start"}
	bodyWS   = []string{"", " ", "\n\t ", "\r\n", "\u00a0", "\v"}
	bodyTail = []string{"", " ", "\n", "x", "{}", "\u00a0", ",", "}"}
)

// randomBookingBody is a booking body, usually plain, often bent in one of
// the ways that encoding/json treats differently from the plain shape.
func randomBookingBody(rng *rand.Rand) []byte {
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	var b strings.Builder
	b.WriteString(pick(bodyWS))
	b.WriteString("{")
	n := rng.IntN(6)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(pick(bodyWS))
		key := bodyKeys[rng.IntN(4)]
		if rng.IntN(6) == 0 {
			key = pick(bodyKeys)
		}
		b.WriteString(`"` + key + `"` + pick(bodyWS) + ":" + pick(bodyWS))
		switch {
		case strings.EqualFold(key, "metadata") || rng.IntN(10) == 0:
			b.WriteString(pick(bodyMetadata))
		case rng.IntN(3) == 0:
			b.WriteString(pick(bodyStrings))
		default:
			b.WriteString(bodyStrings[rng.IntN(2)])
		}
		b.WriteString(pick(bodyWS))
	}
	b.WriteString("}")
	if rng.IntN(4) == 0 {
		b.WriteString(pick(bodyTail))
	}
	body := []byte(b.String())
	if rng.IntN(20) == 0 {
		body = body[:rng.IntN(len(body)+1)]
	}
	return body
}

// TestBookingBodyFastPathMatchesEncodingJSON: on 50,000 random bodies the
// shortcut never accepts what encoding/json would decode differently or
// refuse, and it does take the plain shape.
func TestBookingBodyFastPathMatchesEncodingJSON(t *testing.T) {
	plain := []byte(`{"start":"2026-12-01T10:00:00Z","end":"2026-12-01T11:00:00Z","customer":"bob","metadata":{"room":"3"}}`)
	if !checkFastBooking(t, plain) {
		t.Fatalf("the plain body %s does not take the fast path", plain)
	}
	rng := rand.New(rand.NewPCG(15, 19))
	fast := 0
	const runs = 50000
	for range runs {
		if checkFastBooking(t, randomBookingBody(rng)) {
			fast++
		}
	}
	if fast < runs/10 || fast > runs*9/10 {
		t.Errorf("%d of %d random bodies took the fast path: the generator no longer tests both sides", fast, runs)
	}
}

func FuzzBookingBodyFastPath(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 64 {
		f.Add(randomBookingBody(rng))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkFastBooking(t, body) })
}
