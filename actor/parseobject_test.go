package actor

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// objectFastTarget has a field of each kind ParseObjectFast fills.
type objectFastTarget struct {
	S string          `json:"s"`
	B []byte          `json:"-"`
	R json.RawMessage `json:"r"`
	U uint64          `json:"u"`
	T bool            `json:"t"`
}

// checkParseObjectFast fails unless ParseObjectFast, when it answers,
// decodes data as json.Decoder does (with nothing but white space after
// the object).
func checkParseObjectFast(t *testing.T, data []byte) {
	t.Helper()
	var got objectFastTarget
	var b []byte
	if !ParseObjectFast(data, []FastField{{Name: "s", Str: &got.S}, {Name: "r", Raw: &got.R},
		{Name: "u", Uint: &got.U}, {Name: "t", Bool: &got.T}, {Name: "b", Bytes: &b}}) {
		return
	}
	var want objectFastTarget
	var wantB struct {
		B *string `json:"b"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&want); err != nil || trailingData(data, dec) || json.Unmarshal(data, &wantB) != nil {
		t.Fatalf("ParseObjectFast read %s, which encoding/json refuses (%v)", data, err)
	}
	if wantB.B != nil && string(b) != *wantB.B || wantB.B == nil && b != nil {
		t.Fatalf("%s: bytes %q, want %v", data, b, wantB.B)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", data, got, want)
	}
}

func TestParseObjectFastMatchesJSON(t *testing.T) {
	for _, in := range []string{
		`{"s":"x","r":{"a":[1,2]},"u":7,"t":true,"b":"bytes"}`,
		` { "t" : false , "u" : 0 } `,
		`{"u":-1}`, `{"u":1.5}`, `{"t":null}`, `{"s":"a\"b"}`, `{"S":"x"}`, `{"u":123456789012345678}`,
	} {
		checkParseObjectFast(t, []byte(in))
	}
	var ack objectFastTarget
	if !ParseObjectFast([]byte(`{"u":42,"t":true}`), []FastField{{Name: "u", Uint: &ack.U}, {Name: "t", Bool: &ack.T}}) || ack.U != 42 || !ack.T {
		t.Fatalf("the plain shape was not read: %+v", ack)
	}
}

// FuzzParseObjectFast checks ParseObjectFast against encoding/json.
func FuzzParseObjectFast(f *testing.F) {
	f.Add([]byte(`{"s":"x","r":{"a":[1,2]},"u":7,"t":true,"b":"y"}`))
	f.Add([]byte(`{"u":18446744073709551615}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkParseObjectFast(t, data) })
}
