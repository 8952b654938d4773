package actor_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/bookline/bookline/actor"
)

// fingerprintGolden are schema 1 commands of every type with every field
// set, and their fingerprints. The fingerprint is part of every request
// record and of Nats-Msg-Id: every build, older or newer, must compute the
// same one for the same command.
var fingerprintGolden = []struct{ body, fp string }{
	{`{"v":1,"type":"calendar.upsert","request_id":"g1","calendar_id":"gc","calendar":{"name":"Clinic","timezone":"Europe/Berlin",` +
		`"weekly_hours":{"mon":[{"start":"08:00","end":"12:00"},{"start":"13:00","end":"17:00"}],"sat":[]},` +
		`"date_overrides":[{"date":"2026-12-24","closed":true},{"date":"2026-12-31","hours":[{"start":"09:00","end":"12:00"}]}],` +
		`"slot_step_minutes":15,"min_duration_minutes":15,"max_duration_minutes":120,"allowed_durations_minutes":[15,30,60],` +
		`"buffer_before_minutes":5,"buffer_after_minutes":10,"min_notice_minutes":60,"horizon_days":90,"capacity":3,` +
		`"max_hold_ttl_seconds":900,"google":{"calendar_id":"clinic@example.com","sync_busy":true}}}`, "6b163fe8804a1d41939b1b149310a4bd"},
	{`{"v":1,"type":"booking.create","request_id":"g2","calendar_id":"gc","booking":{"start":"2026-12-01T10:00:00+01:00",` +
		`"end":"2026-12-01T10:30:00+01:00","customer":"Ada","metadata":{"z":1,"a":[true,null]}}}`, "2e42ce9b7ef2b50bae2907a403c3af06"},
	{`{"v":1,"type":"hold.create","request_id":"g3","calendar_id":"gc","booking":{"start":"2026-12-01T11:00:00Z",` +
		`"end":"2026-12-01T11:30:00Z","customer":"Bob","metadata":{},"ttl_seconds":600}}`, "130dec404e6fe8ce8fddae091b94b5b3"},
	{`{"v":1,"type":"booking.cancel","request_id":"g4","calendar_id":"gc","booking_id":"tf11b2643s1m87jckbpma5mgak"}`, "a219d9fb9b43790e9d4fd50d9bc238b3"},
	{`{"v":1,"type":"hold.confirm","request_id":"g5","calendar_id":"gc","booking_id":"tf11b2643s1m87jckbpma5mgak"}`, "a67f18ea683dbc261fed27b79dc9844c"},
	{`{"v":1,"type":"hold.release","request_id":"g6","calendar_id":"gc","booking_id":"tf11b2643s1m87jckbpma5mgak"}`, "217e43f7b1bfe74a94e7d7cbd6e7332c"},
	{`{"v":1,"type":"booking.reschedule","request_id":"g7","calendar_id":"gc","booking_id":"tf11b2643s1m87jckbpma5mgak",` +
		`"reschedule":{"start":"2026-12-01T12:00:00Z","end":"2026-12-01T12:30:00Z"}}`, "bdc69467eca681376619061f5691f8b5"},
	{`{"v":1,"type":"hold.expire","request_id":"g8","calendar_id":"gc"}`, "1ac10713fe5243b4b032d9165f992894"},
	{`{"v":1,"type":"busy.set","request_id":"g9","calendar_id":"gc","busy":{"block_id":"g.x","start":"2026-12-01T12:00:00Z","end":"2026-12-02T12:00:00Z"}}`, "7cc29bc3c38093f6453b27a643634acb"},
	{`{"v":1,"type":"busy.clear","request_id":"g10","calendar_id":"gc","busy":{"block_id":"g.x"}}`, "91612ed2982fa235899f856b1ec226e7"},
}

// withUnknownFields adds fields this build does not know at every level of a
// command's JSON, as a newer build's informational fields would be.
func withUnknownFields(t *testing.T, body string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	var walk func(v any, depth int)
	walk = func(v any, depth int) {
		switch x := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			for _, k := range keys {
				if k != "metadata" && k != "weekly_hours" { // user data and a map of weekdays
					walk(x[k], depth+1)
				}
			}
			if wh, ok := x["weekly_hours"].(map[string]any); ok {
				for _, rs := range wh {
					walk(rs, depth+1)
				}
			}
			x[fmt.Sprintf("x_note_%d", depth)] = map[string]any{"from": "a newer build", "n": depth}
			x["trace"] = []any{1, "two"}
		case []any:
			for _, e := range x {
				walk(e, depth+1)
			}
		}
	}
	walk(v, 0)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFingerprintV1Stable: the fingerprint of a schema 1 command is fixed
// (golden values), and fields this build does not know, at any level, do
// not change it: a newer build's informational fields leave an older
// build's fingerprint, and so its answer to a retry, alone.
func TestFingerprintV1Stable(t *testing.T) {
	for i, g := range fingerprintGolden {
		d := actor.Decode(actor.Input{Seq: 1, At: t0, SubjectCalendar: "gc", Data: []byte(g.body)})
		if d.Reject != nil || d.Newer != 0 {
			t.Fatalf("golden %d rejected: %+v", i, d.Reject)
		}
		if d.Fingerprint != g.fp {
			t.Errorf("golden %d (%s): fingerprint %s, want %s", i, d.Cmd.Type, d.Fingerprint, g.fp)
		}
		extra := withUnknownFields(t, g.body)
		if i == 0 && !strings.Contains(extra, "x_note_5") {
			t.Fatalf("no nested unknown field added: %s", extra)
		}
		if e := actor.Decode(actor.Input{Seq: 2, At: t0, SubjectCalendar: "gc", Data: []byte(extra)}); e.Reject != nil || e.Fingerprint != d.Fingerprint {
			t.Errorf("golden %d with unknown fields: fingerprint %s (reject %+v), want %s\n%s", i, e.Fingerprint, e.Reject, d.Fingerprint, extra)
		}
	}
	// The same request id with and without a newer build's fields is one
	// request: the recorded answer, not idempotency_key_reused.
	h := newHarness(t)
	first, _ := h.send("gc", fingerprintGolden[0].body)
	again, r := h.send("gc", withUnknownFields(t, fingerprintGolden[0].body))
	if !bytes.Equal(again.Reply, first.Reply) || r.Code != "" {
		t.Fatalf("retry with unknown fields answered\n%s\nfirst\n%s", again.Reply, first.Reply)
	}
}
