package actor

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// jsonPaths lists the JSON field paths of type t ("booking.start",
// "calendar.weekly_hours.*.start"), following pointers, slices, maps and
// embedded structs; times and raw JSON are leaves.
func jsonPaths(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() == reflect.Map {
		jsonPaths(t.Elem(), prefix+"*.", out)
		return
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return
	}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			jsonPaths(f.Type, prefix, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		*out = append(*out, prefix+name)
		if f.Type != reflect.TypeFor[json.RawMessage]() {
			jsonPaths(f.Type, prefix+name+".", out)
		}
	}
}

// fingerprintedV1 is the field set of the schema 1 fingerprint. It never
// changes (see fpV1).
var fingerprintedV1 = []string{
	"booking", "booking.customer", "booking.end", "booking.metadata", "booking.start", "booking.ttl_seconds",
	"booking_id", "busy", "busy.block_id", "busy.end", "busy.start",
	"calendar", "calendar.allowed_durations_minutes", "calendar.buffer_after_minutes", "calendar.buffer_before_minutes",
	"calendar.capacity", "calendar.date_overrides", "calendar.date_overrides.closed", "calendar.date_overrides.date",
	"calendar.date_overrides.hours", "calendar.date_overrides.hours.end", "calendar.date_overrides.hours.start",
	"calendar.google", "calendar.google.calendar_id", "calendar.google.sync_busy", "calendar.horizon_days",
	"calendar.max_duration_minutes", "calendar.max_hold_ttl_seconds", "calendar.min_duration_minutes",
	"calendar.min_notice_minutes", "calendar.name", "calendar.slot_step_minutes", "calendar.timezone",
	"calendar.weekly_hours", "calendar.weekly_hours.*.end", "calendar.weekly_hours.*.start",
	"calendar_id", "reschedule", "reschedule.end", "reschedule.start", "type",
}

// notFingerprinted are the command's fields outside the fingerprint: the
// envelope, and informational fields added under schema 1. A request's
// record retention is the publisher's setting, not part of what is
// requested: a retry under another retention is the same request. A
// link's event title and visibility shape the Google mirror only, never a
// decision.
// skip is a field of schema version 2 (partition.skip), whose own
// fingerprint body (fpSkipV2) has it; a version 1 command that carries a
// member named skip is fingerprinted without it.
// booking.recurrence, booking.on_conflict and scope are fields of schema
// version 3 (series.go): a version 3 command's fingerprint adds them
// (fpSeriesV3); an earlier version's command is decided, and
// fingerprinted, without them. collective and pool are fields of schema
// version 4 (collective.go, pool.go), added the same way
// (v4Fingerprint), move of schema version 5 (collective_move.go,
// v5Fingerprint), and commits, collective.commits' of version 5
// (collective_commits.go, commitsFingerprint).
var notFingerprinted = []string{"move", "move.end", "move.id", "move.start", "booking.on_conflict", "commits", "commits.Entries",
	"commits.Entries.calendar_id", "commits.Entries.id", "commits.Entries.calendar_ids", "collective", "collective.calendar_ids",
	"collective.decision", "collective.hold", "collective.id",
	"pool", "pool.booking_id", "pool.calendar_ids", "pool.chosen", "pool.id", "pool.strategy", "pool.weights", "booking.recurrence", "booking.recurrence.count", "booking.recurrence.freq",
	"booking.recurrence.interval", "booking.recurrence.until", "calendar.google.check_freebusy", "calendar.google.event_title",
	"calendar.google.visibility", "record_ttl_seconds", "request_id", "scope", "skip", "skip.seq", "v"}

// TestFingerprintFieldsV1: the fingerprint body is exactly the schema 1
// field set, and every field a command can carry is either in it or
// declared outside it. A field added to the command types later fails
// here: an informational one goes to notFingerprinted (it must not change
// the fingerprint); one the writer must not ignore needs a new schema
// version with its own fingerprint body.
func TestFingerprintFieldsV1(t *testing.T) {
	var body, cmd []string
	jsonPaths(reflect.TypeFor[fpV1](), "", &body)
	jsonPaths(reflect.TypeFor[Command](), "", &cmd)
	slices.Sort(body)
	if !slices.Equal(body, fingerprintedV1) {
		t.Fatalf("the schema 1 fingerprint body changed:\n%q\nwant\n%q", body, fingerprintedV1)
	}
	for _, f := range cmd {
		if !slices.Contains(fingerprintedV1, f) && !slices.Contains(notFingerprinted, f) {
			t.Errorf("command field %q is neither in the schema 1 fingerprint nor declared outside it", f)
		}
	}
	for _, f := range fingerprintedV1 {
		if !slices.Contains(cmd, f) {
			t.Errorf("fingerprinted field %q is not a command field", f)
		}
	}
}
