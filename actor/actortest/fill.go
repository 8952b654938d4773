// Package actortest helps the tests of the wire codecs (actor's command
// and reply, data's booking) and of the paths that use them: Fill sets
// every field of a value by reflection, so that a test that sends it
// through a codec and back fails when a field added later is dropped by
// any path.
package actortest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// A Filler sets every field of a value, walking into structs, pointers,
// slices (two elements) and maps (two entries), to a value that is not
// zero and that no other field gets, so that a field decoded into another
// one's place shows too.
type Filler struct {
	TB testing.TB
	n  int
	// Escaped: strings that JSON must escape (which the scans refuse).
	Escaped bool
	// JSONOnly leaves zero the fields encoding/json skips (tag "-"): what
	// decoding the JSON of the same value gives.
	JSONOnly bool
	// Unexported fields are left zero (a value decoding sets them, such
	// as a validity flag); else the filler fails the test on one.
	Unexported bool
}

// Fill fills *ptr with a new Filler of these options.
func Fill(tb testing.TB, ptr any, escaped, jsonOnly bool) {
	f := Filler{TB: tb, Escaped: escaped, JSONOnly: jsonOnly, Unexported: true}
	f.Fill(reflect.ValueOf(ptr).Elem(), reflect.TypeOf(ptr).Elem().Name())
}

// Fill sets v, named path in messages.
func (f *Filler) Fill(v reflect.Value, path string) {
	f.n++
	switch v.Type() {
	case timeType:
		// UTC and without a monotonic reading, as the decoders return times.
		v.Set(reflect.ValueOf(time.Unix(1_800_000_000+int64(f.n)*3607, int64(f.n)*1_000_003).UTC()))
		return
	case rawType:
		// Compact JSON, which json.Marshal writes and decodes as is.
		v.SetBytes(fmt.Appendf(nil, `{"n":%d}`, f.n))
		return
	}
	switch v.Kind() {
	case reflect.String:
		s := fmt.Sprintf("s%d", f.n)
		if f.Escaped {
			s += " <\"&\\\n\t\x01\u2028é>"
		}
		v.SetString(s)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(f.n))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		f.Fill(v.Elem(), path)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			f.Fill(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		m := reflect.MakeMapWithSize(v.Type(), 2)
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			f.Fill(k, path+" key")
			f.Fill(e, path+" value")
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			p := path + "." + sf.Name
			if !sf.IsExported() {
				if f.Unexported {
					continue
				}
				f.TB.Fatalf("%s: the filler cannot set an unexported field", p)
			}
			// Filled either way, so that every other field gets the same
			// value in both views.
			f.Fill(v.Field(i), p)
			if f.JSONOnly && sf.Tag.Get("json") == "-" {
				v.Field(i).SetZero()
			}
		}
	default:
		f.TB.Fatalf("%s: the filler does not know %s values", path, v.Type())
	}
}
