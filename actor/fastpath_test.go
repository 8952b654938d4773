package actor

// Differential tests of the fast paths (fastpath.go) against the original
// implementation kept in reference_test.go: Decode, Fingerprint,
// CanonicalMetadata and the id checks must give identical results, error
// texts included, for every input.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
)

var diffSubjects = []string{"cal1", "c-2", ""}

// checkDecodeSame fails t unless Decode and decodeReference agree on in at
// rules level 1, and Decode's answer at level 2 is decodeStrict's.
func checkDecodeSame(t testing.TB, in Input) {
	t.Helper()
	want := decodeReference(in)
	got := Decode(in)
	checkStrictSame(t, in, got)
	var legacy Decoded
	if decodeLegacy(in, &legacy); legacy.Newer > 0 {
		// A command of a newer schema than version 1: the reference
		// (written before builds held them) rejected every one as
		// invalid_command; the builds that knew only version 1 held it,
		// so it is decoded by the strict rules at every level.
		if legacy.Newer <= 1 || legacy.Reject != nil || legacy.Fingerprint != "" || want.Reject == nil || want.Reject.Code != CodeInvalidCommand {
			t.Fatalf("Decode(%q): newer %d, reference %+v", in.Data, legacy.Newer, want.Reject)
		}
		if got.strict != nil {
			t.Fatalf("Decode(%q): a strict-only decoding with a second answer %+v", in.Data, got.strict)
		}
		return
	}
	if got.Declared > 1 {
		t.Fatalf("Decode(%q): declares %d, decided at level 1", in.Data, got.Declared)
	}
	got.strict, got.Declared = nil, 0
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode(%q) on %q:\n got %+v\nwant %+v\n got cmd %s\nwant cmd %s", in.Data, in.SubjectCalendar,
			got, want, mustMarshal(t, got.Cmd), mustMarshal(t, want.Cmd))
	}
	if g, w := mustMarshal(t, got.Reject), mustMarshal(t, want.Reject); !bytes.Equal(g, w) {
		t.Fatalf("Decode(%q): reject\n%s\nwant\n%s", in.Data, g, w)
	}
	if g, w := mustMarshal(t, got.Cmd), mustMarshal(t, want.Cmd); !bytes.Equal(g, w) {
		t.Fatalf("Decode(%q): command\n%s\nwant\n%s", in.Data, g, w)
	}
}

// checkStrictSame fails t unless got, Decode's result for in, answers at
// rules level 2 what decodeStrict does: the shortcuts of strictDifference
// must not miss what the strict rules refuse.
func checkStrictSame(t testing.TB, in Input, got Decoded) {
	t.Helper()
	s := decodeStrict(in)
	if s.Newer != got.Newer || max(s.Declared, 1) != max(got.Declared, 1) {
		t.Fatalf("Decode(%q): newer %d declared %d, strict decoding newer %d declared %d", in.Data, got.Newer, got.Declared, s.Newer, s.Declared)
	}
	if s.Newer > 0 {
		return
	}
	reject := got.Reject
	if got.strict != nil {
		reject = got.strict
	}
	if g, w := mustMarshal(t, reject), mustMarshal(t, s.Reject); !bytes.Equal(g, w) {
		t.Fatalf("Decode(%q) at level 2: reject\n%s\nwant\n%s", in.Data, g, w)
	}
	if reject != nil {
		return
	}
	if g, w := mustMarshal(t, got.Cmd), mustMarshal(t, s.Cmd); !bytes.Equal(g, w) || got.Fingerprint != s.Fingerprint {
		t.Fatalf("Decode(%q) at level 2: command\n%s %s\nwant\n%s %s", in.Data, g, got.Fingerprint, w, s.Fingerprint)
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		return []byte("marshal error: " + err.Error())
	}
	return b
}

func checkDecodeAllSubjects(t testing.TB, data []byte) {
	t.Helper()
	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.FixedZone("", 5*3600+1800))
	for i, sub := range diffSubjects {
		checkDecodeSame(t, Input{Seq: uint64(100 + i), At: at, SubjectCalendar: sub, Data: data})
	}
}

// corpusInputs reads the checked-in fuzz corpora of the package.
func corpusInputs(t testing.TB) [][]byte {
	t.Helper()
	files, err := filepath.Glob("testdata/fuzz/*/*")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "[]byte(") || !strings.HasSuffix(line, ")") {
				continue
			}
			s, err := strconv.Unquote(line[len("[]byte(") : len(line)-1])
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, []byte(s))
		}
	}
	if len(out) < 8 {
		t.Fatalf("only %d corpus entries found", len(out))
	}
	return out
}

// handSeeds are inputs on the edges of what the fast parser accepts.
var handSeeds = []string{
	``, ` `, `{}`, ` {} `, `{`, `}`, `null`, `[]`, `"x"`, `1`, "\ufeff{}",
	`{"v":1}`, `{"v":1}}`, `{"v":1} x`, `{"v":1}{}`, `{"v":1} `, "{\"v\":1}\n\t\r ",
	`{"v":01}`, `{"v":-0}`, `{"v":-1}`, `{"v":1.0}`, `{"v":1e0}`, `{"v":"1"}`, `{"v":null}`, `{"v":true}`,
	`{"v":123456789012345678}`, `{"v":1234567890123456789}`, `{"v":12345678901234567890}`, `{"v":-9223372036854775808}`,
	`{"v":1,"v":1}`, `{"V":1}`, `{"v":1,"Type":"booking.cancel"}`, `{"v":1,"x":1}`,
	`{"v":1,"type":"booking.cancel","request_id":"r","calendar_id":"cal1","booking_id":"k56b80nu5jhjk7hrqqejbo27kc"}`,
	`{"v":1,"type":"booking.cancel","request_id":"r","calendar_id":"cal1","booking_id":"k56b80nu5jhjk7hrqqejbo27kc",}`,
	`{"v":1,"type":"booking.cancel","request_id":"r","calendar_id":"cal1","booking_id":"k56b80nu5jhjk7hrqqejbo27k\u0063"}`,
	`{"v":1,"type":"booking.cancel","request_id":"r","calendar_id":"cal\u0031","booking_id":"k56b80nu5jhjk7hrqqejbo27kc"}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":null}`,
	`{"v":1,"record_ttl_seconds":86400,"type":"booking.cancel","request_id":"r","calendar_id":"cal1","booking_id":"k56b80nu5jhjk7hrqqejbo27kc"}`,
	`{"v":1,"type":"hold.expire","request_id":"expire.1","calendar_id":"cal1","record_ttl_seconds":0}`,
	`{"v":1,"type":"hold.expire","request_id":"expire.1","calendar_id":"cal1","record_ttl_seconds":-1}`,
	`{"v":1,"type":"hold.expire","request_id":"expire.1","calendar_id":"cal1","record_ttl_seconds":316224001}`,
	`{"v":1,"type":"hold.expire","request_id":"expire.1","calendar_id":"cal1","record_ttl_seconds":1.5}`,
	`{"v":1,"type":"hold.expire","request_id":"expire.1","calendar_id":"cal1","record_ttl_seconds":"60"}`,
	`{"v":1,"type":"hold.expire","request_id":"expire.1","calendar_id":"cal1","record_ttl_seconds":60,"record_ttl_seconds":61}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{}}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{"b":1,"a":2}}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{"a":{"b":[1,2,{"c":null}]},"b":"x y"}}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{"a":1,"a":2}}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{"a":"<&>"}}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{"a":"\u2028"}}}`,
	"{\"v\":1,\"type\":\"booking.create\",\"request_id\":\"r\",\"calendar_id\":\"cal1\",\"booking\":{\"start\":\"2026-03-02T10:00:00Z\",\"end\":\"2026-03-02T11:00:00Z\",\"customer\":\"A\",\"metadata\":{\"a\":\"\u2028\"}}}",
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{"a":1}x}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{"a":"}"}}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{"a":"\"}"}}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":[]}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":null}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{"a":1e999,"b":-0,"c":0.5e-3}}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","Metadata":{}}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","start":"2026-03-02T10:30:00Z","end":"2026-03-02T11:00:00Z","customer":"A"}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02t10:00:00z","end":"2026-03-02T11:00:00.123456789+05:30","customer":"Zoë"}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00+24:00","end":"2026-03-02T11:00:00-00:00","customer":"A"}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":null,"end":"2026-03-02T11:00:00Z","customer":"A"}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"","end":"2026-03-02T11:00:00Z","customer":"A"}}`,
	`{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A\u0026B"}}`,
	"{\"v\":1,\"type\":\"booking.create\",\"request_id\":\"r\",\"calendar_id\":\"cal1\",\"booking\":{\"start\":\"2026-03-02T10:00:00Z\",\"end\":\"2026-03-02T11:00:00Z\",\"customer\":\"A\xffB\"}}",
	"{\"v\":1,\"type\":\"booking.create\",\"request_id\":\"r\",\"calendar_id\":\"cal1\",\"booking\":{\"start\":\"2026-03-02T10:00:00Z\",\"end\":\"2026-03-02T11:00:00Z\",\"customer\":\"A\tB\"}}",
	`{"v":1,"type":"hold.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","ttl_seconds":300}}`,
	`{"v":1,"type":"hold.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","ttl_seconds":30.0}}`,
	`{"v":1,"type":"hold.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","ttl_seconds":-5}}`,
	`{"v":1,"type":"booking.reschedule","request_id":"r","calendar_id":"cal1","booking_id":"k56b80nu5jhjk7hrqqejbo27kc","reschedule":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z"}}`,
	`{"v":1,"type":"booking.reschedule","request_id":"r","calendar_id":"cal1","booking_id":"k56b80nu5jhjk7hrqqejbo27kc","reschedule":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","x":1}}`,
	`{"v":1,"type":"hold.expire","request_id":"r","calendar_id":"cal1"}`,
	`{"v":1,"type":"busy.set","request_id":"r","calendar_id":"cal1","busy":{"block_id":"b1","start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z"}}`,
	`{"v":1,"type":"calendar.upsert","request_id":"r","calendar_id":"cal1","calendar":{"name":"R","timezone":"Europe/Berlin"}}`,
}

func TestDecodeMatchesReferenceCorpus(t *testing.T) {
	for _, in := range corpusInputs(t) {
		checkDecodeAllSubjects(t, in)
	}
	for _, s := range handSeeds {
		checkDecodeAllSubjects(t, []byte(s))
	}
	big := `{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{"a":"` + strings.Repeat("x", MaxCommandBytes) + `"}}}`
	checkDecodeAllSubjects(t, []byte(big))
	deep := `{"v":1,"type":"booking.create","request_id":"r","calendar_id":"cal1","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"A","metadata":{"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}}}`
	checkDecodeAllSubjects(t, []byte(deep))
}

// --- random commands ---

// pieces of random strings: plain text, JSON and HTML specials, line and
// paragraph separators, control characters, invalid UTF-8.
var strPieces = []string{
	"a", "Z", "0", "9", "-", "_", ".", ":", " ", "Ada", "room", "cal1",
	"<", ">", "&", `"`, `\`, "/", "\u2028", "\u2029", "é", "Zoë", "日本", "😀", "\ufffd", "\ufeff",
	"\x00", "\x08", "\x0c", "\n", "\r", "\t", "\x1f", "\x7f", "\xff", "\xc3(", "\xe2\x80", "\xed\xa0\x80",
}

func randString(r *rand.Rand, max int) string {
	var sb strings.Builder
	for n := r.IntN(max + 1); n > 0; n-- {
		if r.IntN(3) == 0 {
			sb.WriteString(strPieces[r.IntN(len(strPieces))])
		} else {
			sb.WriteByte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:"[r.IntN(66)])
		}
	}
	return sb.String()
}

func randID(r *rand.Rand) string {
	switch r.IntN(10) {
	case 0:
		return randString(r, 6)
	case 1:
		return strings.Repeat("x", 120+r.IntN(20))
	}
	return fmt.Sprintf("req-%d", r.IntN(1e6))
}

// quoteJSON renders s as a JSON string literal in one of several ways:
// mostly raw (as a hand-written producer would), or as json.Marshal writes
// it, or with \u escapes; sometimes invalid (raw control characters).
func quoteJSON(r *rand.Rand, s string) string {
	switch r.IntN(8) {
	case 0:
		b, _ := json.Marshal(s)
		return string(b)
	case 1:
		var sb strings.Builder
		sb.WriteByte('"')
		for _, c := range s {
			if c < 0x10000 && r.IntN(2) == 0 {
				fmt.Fprintf(&sb, `\u%04X`, c)
			} else {
				sb.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(string(c)))
			}
		}
		sb.WriteByte('"')
		return sb.String()
	case 2:
		return `"` + s + `"` // maybe invalid
	}
	var sb strings.Builder
	sb.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&sb, `\u%04x`, c)
		default:
			sb.WriteByte(c)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

var offsetSuffixes = []string{"Z", "Z", "Z", "+00:00", "-00:00", "+05:30", "-08:00", "+14:00", "-12:00", "+23:59", "+24:00", "z", "+0530", "+05:3"}

func randTimeString(r *rand.Rand) string {
	switch r.IntN(30) {
	case 0:
		return ""
	case 1:
		return randString(r, 10)
	case 2:
		return "2026-02-30T10:00:00Z"
	}
	year := 2026
	switch r.IntN(10) {
	case 0:
		year = 1960 + r.IntN(20)
	case 1:
		year = 2190 + r.IntN(20)
	case 2:
		year = r.IntN(10000)
	}
	s := fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d", year, 1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(4)*15, r.IntN(2)*r.IntN(60))
	if r.IntN(4) == 0 {
		s += "." + fmt.Sprintf("%09d", r.IntN(1e9))[:1+r.IntN(9)]
	}
	if r.IntN(20) == 0 {
		s = strings.Replace(s, "T", "t", 1)
	}
	return s + offsetSuffixes[r.IntN(len(offsetSuffixes))]
}

// randJSONValue renders a random JSON value with random white space,
// unsorted (sometimes duplicate) keys and numbers as written.
func randJSONValue(r *rand.Rand, depth int) string {
	ws := func() string { return []string{"", "", "", " ", "\n", "\t ", "\r\n"}[r.IntN(7)] }
	k := r.IntN(10)
	if depth > 3 {
		k = 4 + r.IntN(6)
	}
	switch k {
	case 0, 1:
		return randJSONObject(r, depth)
	case 2, 3:
		n := r.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = ws() + randJSONValue(r, depth+1) + ws()
		}
		return "[" + strings.Join(parts, ",") + "]"
	case 4, 5:
		return quoteJSON(r, randString(r, 8))
	case 6:
		return []string{"0", "-0", "1", "1.50", "12345678901234567890123", "1e999", "-2.5E+3", "0.000", "1E-7"}[r.IntN(9)]
	case 7:
		return []string{"true", "false", "null"}[r.IntN(3)]
	case 8:
		return strconv.Itoa(r.IntN(1000))
	}
	return `"` + randString(r, 5) + `"`
}

func randJSONObject(r *rand.Rand, depth int) string {
	keys := []string{"a", "b", "note", "Note", "z", "a b", "é", "<", "", "10", "9", "a\u2028"}
	n := r.IntN(5)
	parts := make([]string, n)
	for i := range parts {
		key := keys[r.IntN(len(keys))]
		if r.IntN(4) == 0 {
			key = randString(r, 4)
		}
		sep := ":"
		if r.IntN(5) == 0 {
			sep = " : "
		}
		parts[i] = quoteJSON(r, key) + sep + randJSONValue(r, depth+1)
	}
	if r.IntN(2) == 0 {
		// sorted, compact: often canonical
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		sortStrings(parts)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

var allTypes = []string{TypeBookingCreate, TypeBookingCreate, TypeBookingCancel, TypeBookingReschedule,
	TypeHoldCreate, TypeHoldConfirm, TypeHoldRelease, TypeHoldExpire, TypeBusySet, TypeBusyClear, TypeCalendarUpsert}

type member struct{ key, val string }

// randCommandMembers returns the top-level members of a random command of
// a random type, values rendered as JSON.
func randCommandMembers(r *rand.Rand) []member {
	typ := allTypes[r.IntN(len(allTypes))]
	if r.IntN(30) == 0 {
		typ = []string{"Booking.Create", "booking.delete", "", "booking.create "}[r.IntN(4)]
	}
	v := "1"
	if r.IntN(15) == 0 {
		v = []string{"0", "2", "-1", "1.0", `"1"`, "null", "1e0", "9999999999999999999"}[r.IntN(8)]
	}
	cal := "cal1"
	if r.IntN(10) == 0 {
		cal = []string{"c-2", "", "cal 1", "CAL1", randString(r, 5)}[r.IntN(5)]
	}
	ms := []member{{"v", v}, {"type", quoteJSON(r, typ)}, {"request_id", quoteJSON(r, randID(r))}, {"calendar_id", quoteJSON(r, cal)}}
	iv := func() string {
		return fmt.Sprintf(`{"start":%s,"end":%s}`, quoteJSON(r, randTimeString(r)), quoteJSON(r, randTimeString(r)))
	}
	bid := func() string {
		if r.IntN(8) == 0 {
			return quoteJSON(r, randString(r, 26))
		}
		return quoteJSON(r, BookingID("cal1", randID(r)))
	}
	switch typ {
	case TypeBookingCreate, TypeHoldCreate:
		start := time.Date(2026, 3, 2, r.IntN(24), 0, 0, 0, time.UTC)
		startS, endS := start.Format(time.RFC3339), start.Add(time.Duration(1+r.IntN(120))*time.Minute).Format(time.RFC3339)
		if r.IntN(3) == 0 {
			startS, endS = randTimeString(r), randTimeString(r)
		}
		customer := "Ada Lovelace"
		switch r.IntN(4) {
		case 0:
			customer = randString(r, 12)
		case 1:
			customer = strings.Repeat("é", 195+r.IntN(10))
		}
		b := []member{{"start", quoteJSON(r, startS)}, {"end", quoteJSON(r, endS)}, {"customer", quoteJSON(r, customer)}}
		switch r.IntN(5) {
		case 0:
		case 1:
			b = append(b, member{"metadata", "{}"})
		case 2:
			b = append(b, member{"metadata", randJSONValue(r, 0)})
		default:
			b = append(b, member{"metadata", randJSONObject(r, 0)})
		}
		if typ == TypeHoldCreate || r.IntN(10) == 0 {
			b = append(b, member{"ttl_seconds", []string{"300", "0", "1", "-1", "86400", "86401", "30.5", `"60"`, "null", "1e2"}[r.IntN(10)]})
		}
		ms = append(ms, member{"booking", renderObject(r, b)})
	case TypeBookingCancel, TypeHoldConfirm, TypeHoldRelease:
		ms = append(ms, member{"booking_id", bid()})
	case TypeBookingReschedule:
		ms = append(ms, member{"booking_id", bid()}, member{"reschedule", iv()})
	case TypeBusySet, TypeBusyClear:
		ms = append(ms, member{"busy", fmt.Sprintf(`{"block_id":%s,"start":%s,"end":%s}`, quoteJSON(r, randID(r)), quoteJSON(r, randTimeString(r)), quoteJSON(r, randTimeString(r)))})
	case TypeCalendarUpsert:
		ms = append(ms, member{"calendar", fmt.Sprintf(`{"name":%s,"timezone":%s}`, quoteJSON(r, randString(r, 8)),
			quoteJSON(r, []string{"", "UTC", "Europe/Berlin", "Asia/Kolkata", "Local", "Mars/Base"}[r.IntN(6)]))})
	}
	if r.IntN(12) == 0 { // a body the type does not use
		ms = append(ms, member{[]string{"booking", "booking_id", "reschedule", "busy"}[r.IntN(4)], iv()})
	}
	return ms
}

// renderObject writes members in random order with random white space.
func renderObject(r *rand.Rand, ms []member) string {
	ms = append([]member(nil), ms...)
	if r.IntN(3) == 0 {
		r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	}
	ws := func() string {
		if r.IntN(4) != 0 {
			return ""
		}
		return []string{" ", "\n", "\t", "\r\n  "}[r.IntN(4)]
	}
	var sb strings.Builder
	sb.WriteString(ws() + "{" + ws())
	for i, m := range ms {
		if i > 0 {
			sb.WriteString(ws() + "," + ws())
		}
		sb.WriteString(`"` + m.key + `"` + ws() + ":" + ws() + m.val)
	}
	sb.WriteString(ws() + "}" + ws())
	return sb.String()
}

// mutate breaks or bends an encoded command: truncation, trailing data,
// a repeated or case-changed key, a value of the wrong type, an unknown
// key, a changed byte.
func mutate(r *rand.Rand, ms []member, enc string) string {
	switch r.IntN(9) {
	case 0:
		return enc[:r.IntN(len(enc)+1)]
	case 1:
		return enc + []string{"}", " x", "\n", "{}", " ", "]", "null", ",", "\x00"}[r.IntN(9)]
	case 2:
		i := r.IntN(len(ms))
		ms = append(ms, ms[i])
		if r.IntN(2) == 0 && len(ms) > 1 {
			ms[len(ms)-1].val = ms[r.IntN(len(ms)-1)].val
		}
		return renderObject(r, ms)
	case 3:
		ms = append([]member(nil), ms...)
		i := r.IntN(len(ms))
		ms[i].key = []string{strings.ToUpper(ms[i].key), strings.ToUpper(ms[i].key[:1]) + ms[i].key[1:], ms[i].key + "x", "ſ" + ms[i].key[1:]}[r.IntN(4)]
		return renderObject(r, ms)
	case 4:
		ms = append([]member(nil), ms...)
		i := r.IntN(len(ms))
		ms[i].val = []string{"null", "1", "true", `"x"`, "[]", "{}", "1.5", `{"a":1}`, "-", `"\u0031"`}[r.IntN(10)]
		return renderObject(r, ms)
	case 5:
		ms = append(ms, member{[]string{"extra", "calendar", "busy", "Booking"}[r.IntN(4)], randJSONValue(r, 0)})
		return renderObject(r, ms)
	case 6:
		if len(enc) == 0 {
			return enc
		}
		b := []byte(enc)
		const set = "{}[]\",:\\ a0\xff"
		b[r.IntN(len(b))] = set[r.IntN(len(set))]
		return string(b)
	case 7:
		i := r.IntN(len(enc) + 1)
		return enc[:i] + []string{" ", "\\", "\"", "\u00a0", "\ufeff"}[r.IntN(5)] + enc[i:]
	}
	return "\ufeff" + enc
}

func TestDecodeMatchesReferenceRandom(t *testing.T) {
	n := 5000
	if testing.Short() {
		n = 1000
	}
	r := rand.New(rand.NewPCG(1, 2))
	var fast, accepted int
	check := func(data []byte) {
		var c Command
		if parseCommandFast(data, &c) {
			fast++
		}
		checkDecodeAllSubjects(t, data)
		if Decode(Input{SubjectCalendar: "cal1", Data: data}).Reject == nil {
			accepted++
		}
	}
	for range n {
		ms := randCommandMembers(r)
		enc := renderObject(r, ms)
		check([]byte(enc))
		check([]byte(mutate(r, ms, enc)))
		// The form httpapi publishes: json.Marshal of a (validated) Command.
		d := decodeReference(Input{SubjectCalendar: "cal1", Data: []byte(enc)})
		if d.Reject == nil {
			check(mustMarshal(t, d.Cmd))
		}
	}
	t.Logf("%d inputs took the fast parser, %d were accepted", fast, accepted)
	if fast < n/3 || accepted < n/4 {
		t.Errorf("the random inputs exercise too little: %d fast, %d accepted of %d", fast, accepted, 3*n)
	}
}

// --- Fingerprint ---

var fpLocs = []*time.Location{time.UTC, time.FixedZone("", 5*3600+1800), time.FixedZone("X", -8*3600),
	time.FixedZone("", 3600+17), time.FixedZone("", 24*3600), time.FixedZone("", -99*3600), time.Local}

func randTime(r *rand.Rand) time.Time {
	if r.IntN(8) == 0 {
		return time.Time{}
	}
	year := 1970 + r.IntN(300)
	if r.IntN(10) == 0 {
		year = -5 + r.IntN(20000)
	}
	t := time.Date(year, time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(3)*r.IntN(1e9), time.UTC)
	return t.In(fpLocs[r.IntN(len(fpLocs))])
}

func randRawMetadata(r *rand.Rand) json.RawMessage {
	switch r.IntN(8) {
	case 0:
		return nil
	case 1:
		return json.RawMessage{}
	case 2:
		return json.RawMessage(randString(r, 6)) // mostly invalid
	case 3:
		b, _ := json.Marshal(map[string]any{randString(r, 4): randString(r, 6), "a": []any{1, "x y", nil}})
		return b
	}
	return json.RawMessage(randJSONValue(r, 0))
}

func randCommand(r *rand.Rand) *Command {
	c := &Command{V: r.IntN(3), Type: allTypes[r.IntN(len(allTypes))], RequestID: randString(r, 8), CalendarID: randString(r, 6)}
	if r.IntN(3) == 0 {
		c.Type = randString(r, 8)
	}
	if r.IntN(2) == 0 {
		c.Booking = &BookingSpec{Start: randTime(r), End: randTime(r), Customer: randString(r, 12), Metadata: randRawMetadata(r)}
		if r.IntN(3) == 0 {
			c.Booking.TTLSeconds = r.IntN(1e6) - 1000
		}
	}
	if r.IntN(2) == 0 {
		c.BookingID = randString(r, 26)
	}
	if r.IntN(4) == 0 {
		c.Reschedule = &IntervalSpec{Start: randTime(r), End: randTime(r)}
	}
	if r.IntN(10) == 0 {
		c.Busy = &BusySpec{BlockID: randString(r, 5), Start: randTime(r), End: randTime(r)}
	}
	if r.IntN(10) == 0 {
		c.Calendar = &CalendarSpec{Name: randString(r, 5), Timezone: "UTC"}
		if r.IntN(2) == 0 {
			c.Calendar.Rules = randRules(r)
		}
		if r.IntN(3) == 0 {
			c.Calendar.Link = &data.ExternalLink{CalendarID: randString(r, 10), SyncBusy: r.IntN(2) == 0}
		}
	}
	return c
}

// randRules sets every rule field, sometimes to zero, nil or empty.
func randRules(r *rand.Rand) data.Rules {
	ranges := func() []data.TimeRange {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			return []data.TimeRange{}
		}
		out := make([]data.TimeRange, 1+r.IntN(3))
		for i := range out {
			out[i] = data.TimeRange{Start: randString(r, 5), End: randString(r, 5)}
		}
		return out
	}
	n := func() int { return r.IntN(3) * r.IntN(2000) }
	rules := data.Rules{SlotStepMinutes: n(), MinDurationMinutes: n(), MaxDurationMinutes: n(), BufferBeforeMinutes: n(),
		BufferAfterMinutes: n(), MinNoticeMinutes: n(), HorizonDays: n(), Capacity: n(), MaxHoldTTLSeconds: n()}
	if r.IntN(2) == 0 {
		rules.WeeklyHours = map[string][]data.TimeRange{}
		for range r.IntN(4) {
			rules.WeeklyHours[randString(r, 3)] = ranges()
		}
	}
	if r.IntN(2) == 0 {
		for range r.IntN(3) {
			rules.DateOverrides = append(rules.DateOverrides, data.DateOverride{Date: randString(r, 10), Closed: r.IntN(2) == 0, Hours: ranges()})
		}
	}
	if r.IntN(2) == 0 {
		rules.AllowedDurationsMinutes = []int{}
		for range r.IntN(3) {
			rules.AllowedDurationsMinutes = append(rules.AllowedDurationsMinutes, n())
		}
	}
	return rules
}

func checkFingerprintSame(t testing.TB, c *Command) bool {
	t.Helper()
	want := c.fingerprintJSON()
	got, ok := appendFingerprintBody(nil, c)
	if ok && !bytes.Equal(got, want) {
		t.Fatalf("fingerprint body of %+v:\n got %s\nwant %s", c, got, want)
	}
	if g, w := c.Fingerprint(), fingerprintReference(c); g != w {
		t.Fatalf("Fingerprint of %+v: %s, want %s", c, g, w)
	}
	return ok
}

func TestFingerprintMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	fast := 0
	const n = 30000
	for range n {
		if checkFingerprintSame(t, randCommand(r)) {
			fast++
		}
	}
	t.Logf("%d of %d fingerprints appended by hand", fast, n)
	if fast < n/3 { // the random commands are hostile on purpose
		t.Errorf("only %d of %d fingerprints took the fast path", fast, n)
	}
	// Every byte value and the separators in each string field.
	for b := range 256 {
		for _, s := range []string{string(rune(b)), string([]byte{byte(b)}), "x" + string([]byte{byte(b)}) + "\u2028\u2029y"} {
			checkFingerprintSame(t, &Command{Type: s, CalendarID: s, BookingID: s, Booking: &BookingSpec{Customer: s, Start: time.Unix(0, 1)}})
		}
	}
}

// --- CanonicalMetadata ---

func checkCanonicalSame(t testing.TB, raw []byte) {
	t.Helper()
	got, gerr := CanonicalMetadata(json.RawMessage(raw))
	want, werr := canonicalMetadataReference(json.RawMessage(raw))
	if fmt.Sprint(gerr) != fmt.Sprint(werr) || !bytes.Equal(got, want) || (got == nil) != (want == nil) {
		t.Fatalf("CanonicalMetadata(%q) = %q, %v; want %q, %v", raw, got, gerr, want, werr)
	}
}

func TestCanonicalMetadataMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	fast := 0
	const n = 30000
	for range n {
		raw := []byte(randJSONObject(r, 0))
		switch r.IntN(6) {
		case 0:
			raw = []byte(randJSONValue(r, 0))
		case 1:
			want, err := canonicalMetadataReference(raw)
			if err == nil {
				raw = want // canonical: the fast path's case
			}
		case 2:
			raw = []byte(mutate(r, []member{{"a", "1"}}, string(raw)))
		}
		if isCanonicalObject(bytes.TrimSpace(raw)) {
			fast++
		}
		checkCanonicalSame(t, raw)
	}
	t.Logf("%d of %d metadata objects were already canonical", fast, n)
	if fast < n/10 {
		t.Errorf("only %d of %d took the fast path", fast, n)
	}
	for _, s := range []string{"", " ", "null", " null ", "{}", " {} ", "{} ", "\u00a0{}\u00a0", "{}}", "{}{}", "[]", `{"a":1}`, `{"a":01}`,
		`{"a":-}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":-0.0e-0}`, `{"a":tru}`, `{"a":nul}`, `{"b":1,"a":1}`, `{"a":1,"a":1}`,
		`{"a":"\u0041"}`, `{"a":"<"}`, `{"":1}`, `{"":1,"":2}`, "{\"a\":\"\x7f\"}", "{\"a\":\"\xff\"}", "{\"a\":\"\ufffd\"}",
		"{\"a\":\"\u2028\"}", "{\"a\":\"\x01\"}", `{"a":[1,]}`, `{"a":[,1]}`, `{"a":{}}`, `{"a":[]}`, `{"a":[{}]}`, `{"a":{"b":{"a":1}}}`,
		`{"a":{"b":1,"a":1}}`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{"a" :1}`,
		`{"a":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}`, `{"a":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`,
		`{"a":"` + strings.Repeat("x", MaxMetadataBytes) + `"}`} {
		checkCanonicalSame(t, []byte(s))
	}
}

// --- ids ---

func TestValidIDsMatchRegexp(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	check := func(s string) {
		if g, w := ValidCalendarID(s), refCalendarIDRe.MatchString(s); g != w {
			t.Fatalf("ValidCalendarID(%q) = %v", s, g)
		}
		if g, w := ValidRequestID(s), refRequestIDRe.MatchString(s); g != w {
			t.Fatalf("ValidRequestID(%q) = %v", s, g)
		}
		if g, w := ValidBookingID(s), refBookingIDRe.MatchString(s); g != w {
			t.Fatalf("ValidBookingID(%q) = %v", s, g)
		}
		if g, w := ValidBlockID(s), refBlockIDRe.MatchString(s); g != w {
			t.Fatalf("ValidBlockID(%q) = %v", s, g)
		}
	}
	for b := range 256 {
		for _, n := range []int{1, 26, 64, 65, 128, 129} {
			check(strings.Repeat(string([]byte{byte(b)}), n))
			check(strings.Repeat("a", n-1) + string([]byte{byte(b)}))
		}
		check(string(rune(b)))
	}
	for range 50000 {
		s := randString(r, 30)
		if r.IntN(2) == 0 {
			s = BookingID(s, "x")[:r.IntN(27)]
		}
		check(s)
		check(s + "\n")
	}
	check("")
}

// --- fuzzing ---

// FuzzDecodeMatchesReference hunts for any input on which Decode and the
// original implementation differ. The seed corpus (checked-in corpora,
// edge cases, random commands) runs in every `go test`.
func FuzzDecodeMatchesReference(f *testing.F) {
	for _, in := range corpusInputs(f) {
		f.Add(in)
	}
	for _, s := range handSeeds {
		f.Add([]byte(s))
	}
	r := rand.New(rand.NewPCG(9, 10))
	for range 200 {
		ms := randCommandMembers(r)
		f.Add([]byte(renderObject(r, ms)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeAllSubjects(t, data)
		if bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) && len(data) <= 4096 {
			checkCanonicalSame(t, data)
		}
	})
}
