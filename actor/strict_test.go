package actor

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// strictSeeds are inputs on the edges of the strict rules.
var strictSeeds = []string{
	`{"a":1,"a":2}`, `{"a":1,"A":2}`, `{"k":1,"\u212a":2}`, `{"s":1,"\u017f":2}`, `{"a":1,"b":{"a":1}}`,
	`{"metadata":{"a":1,"A":2}}`, `{"Metadata":{"a":1,"a":2}}`, `{"booking":{"metadata":{"x":{"a":-0}}}}`,
	`{"a":-0}`, `{"a":-0.0}`, `{"a":[-0]}`, `{"a":0}`, `{"a":-01}`, `{"a":1e999}`,
	`{"a":"\ud800"}`, `{"a":"\udc00"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud83d\u0041"}`, `{"a":"\ud83d"}`, `{"a":"\\ud800"}`,
	`{"a":"\ufffd"}`, `{"a":"\uFFFD\ud800"}`, "{\"a\":\"\xef\xbf\xbd\"}", "{\"a\":\"\xff\"}", "{\"\xff\":1}", "{\"a\":\"\xed\xa0\x80\"}",
	`{"v":1,"v":2}`, `{"v":1,"V":2}`, `{"V":3}`, `{"v":"2"}`, `{"v":2.0}`, `{"v":-0}`, `{"v":01}`, `{"v":1234567890}`, `{"v":123456789}`,
	`{"x":{"v":1,"v":2}}`, `[{"v":1}]`, `{"v":1} {"v":2}`, `{"v":1}}`, `{"a":1,}`, `{"a" 1}`, `{"a":tru}`, `"\u00"`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"A":18}`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18}`,
}

// refStrict is the strict rules computed another way, from encoding/json's
// tokens: whether the first value of data is valid JSON and whether it
// breaks a strict rule (a replaced string, a duplicate key, -0), and its
// top-level v members.
func refStrict(data []byte) (ok, violation bool, vCount int, vRaw string) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var whole any
	if dec.Decode(&whole) != nil {
		return false, false, 0, ""
	}
	raw := bytes.TrimLeft(data[:dec.InputOffset()], " \t\r\n")
	// A string was replaced (invalid UTF-8, an escaped lone surrogate)
	// when its value holds more U+FFFD than it was written with.
	literal := bytes.Count(raw, []byte("\uFFFD"))
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' {
			if i+5 < len(raw) && raw[i+1] == 'u' && strings.EqualFold(string(raw[i+2:i+6]), "fffd") {
				literal++
			}
			i++
		}
	}
	decoded := 0
	type frame struct {
		object, opaque bool
		keys           []string
		key            string
		expectKey      bool
	}
	tok := json.NewDecoder(bytes.NewReader(raw))
	tok.UseNumber()
	var stack []*frame
	for {
		t, err := tok.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			panic(err) // Decode accepted it
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expectKey {
			if d, isDelim := t.(json.Delim); isDelim && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k := t.(string)
			decoded += strings.Count(k, "\uFFFD")
			for _, prev := range top.keys {
				if top.opaque && prev == k || !top.opaque && strings.EqualFold(prev, k) {
					violation = true
				}
			}
			top.keys, top.key, top.expectKey = append(top.keys, k), k, false
			continue
		}
		opaque := top != nil && (top.opaque || top.object && strings.EqualFold(top.key, "metadata"))
		if top != nil && top.object {
			top.expectKey = true
			if len(stack) == 1 && strings.EqualFold(top.key, "v") {
				vCount++
				switch v := t.(type) {
				case json.Number:
					vRaw = string(v)
				case string:
					vRaw = "string"
				default:
					vRaw = "other"
				}
			}
		}
		switch v := t.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, &frame{object: true, opaque: opaque, expectKey: true})
			case '[':
				stack = append(stack, &frame{opaque: opaque})
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			decoded += strings.Count(v, "\uFFFD")
		case json.Number:
			if v == "-0" && !opaque {
				violation = true
			}
		}
	}
	return true, violation || decoded > literal, vCount, vRaw
}

func checkStrictScan(t *testing.T, data []byte) {
	t.Helper()
	sc := scanStrict(data)
	ok, violation, vCount, vRaw := refStrict(data)
	if sc.ok != ok {
		t.Fatalf("scanStrict(%q): ok %v, encoding/json %v", data, sc.ok, ok)
	}
	if !ok {
		return
	}
	if (sc.violation != "") != violation {
		t.Fatalf("scanStrict(%q): violation %q, the reference finds one: %v", data, sc.violation, violation)
	}
	if sc.vCount != vCount {
		t.Fatalf("scanStrict(%q): %d v members, the reference %d", data, sc.vCount, vCount)
	}
	switch {
	case vCount == 0, vRaw == "other":
	case vRaw == "string" && sc.vRaw[0] == '"', vRaw == string(sc.vRaw):
	default:
		t.Fatalf("scanStrict(%q): v %q, the reference %q", data, sc.vRaw, vRaw)
	}
	if err := CheckJSON(data); (err != nil) != violation {
		t.Fatalf("CheckJSON(%q): %v", data, err)
	}
}

// FuzzStrictScan holds the strict scanner to encoding/json: the same
// inputs are JSON, and a strict rule is broken exactly when the reference
// built on encoding/json's tokens finds it broken.
func FuzzStrictScan(f *testing.F) {
	for _, s := range strictSeeds {
		f.Add([]byte(s))
	}
	for _, s := range handSeeds {
		f.Add([]byte(s))
	}
	for _, in := range corpusInputs(f) {
		f.Add(in)
	}
	r := rand.New(rand.NewPCG(11, 12))
	for range 200 {
		f.Add([]byte(renderObject(r, randCommandMembers(r))))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkStrictScan(t, data)
	})
}

// TestStrictDecodeSeeds runs the strict seeds through Decode, whose two
// answers (rules level 1 and 2) the differential checks hold to the
// reference and to decodeStrict, and checks the strict answer of each.
func TestStrictDecodeSeeds(t *testing.T) {
	const base = `"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z"`
	for _, c := range []struct{ body, strict string }{
		{`{"v":1,` + base + `,"customer":"A"}}`, ""},
		{`{"v":1,` + base + `,"customer":"A","customer":"B"}}`, `duplicate key "customer"`},
		{`{"v":1,` + base + `,"customer":"A","CUSTOMER":"B"}}`, `duplicate key "CUSTOMER"`},
		{`{"v":1,` + base + `,"customer":"A","metadata":{"a":1,"A":2}}}`, ""},
		{`{"v":1,` + base + `,"customer":"A","metadata":{"a":1,"a":2}}}`, `duplicate key "a"`},
		{`{"v":1,` + base + `,"customer":"A","metadata":{"a":-0}}}`, ""},
		{`{"v":1,` + base + `,"customer":"A","metadata":{"a":"\udfff"}}}`, `lone UTF-16 surrogate`},
		{`{"v":1,` + base + `,"customer":"A\u0000"}}`, ""},
		{`{"v":1,` + base + `,"customer":"\ud83d\ude00"}}`, ""},
		{"{\"v\":1," + base + ",\"customer\":\"A\xc3\"}}", "invalid UTF-8"},
		{`{"v":1,` + base + `,"customer":" \t "}}`, "customer: is required"},
		{`{"v":1,` + base + `,"customer":"\u00a0"}}`, "customer: is required"},
		{`{"v":1,` + base + `,"customer":"A"},"record_ttl_seconds":-0}`, "-0 is not a number"},
		{`{"v":1,` + base + `,"customer":"A"},"skip":5}`, ""},
		{`{"v":1e0,` + base + `,"customer":"A"}}`, "v is not an integer"},
		{`{"v":1234567890,` + base + `,"customer":"A"}}`, "v is out of range"},
	} {
		in := Input{Seq: 1, SubjectCalendar: "cal1", Data: []byte(c.body)}
		checkDecodeSame(t, in)
		d := Decode(in)
		reply := d.Reject
		if d.strict != nil {
			reply = d.strict
		}
		got := ""
		if reply != nil {
			got = reply.Message
			for _, e := range reply.Details {
				got += "; " + e.Field + ": " + e.Message
			}
		}
		if c.strict == "" && reply != nil || !strings.Contains(got, c.strict) {
			t.Errorf("%s: strict answer %q, want %q", c.body, got, c.strict)
		}
		if !utf8.ValidString(got) {
			t.Errorf("%s: message is not UTF-8", c.body)
		}
	}
}
