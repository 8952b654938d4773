package importfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bookline/bookline/actor"
)

// FormatOf names the format of file by its extension: "csv", "ndjson" or
// "ics"; "" when the extension is none of theirs.
func FormatOf(file string) string {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".csv":
		return "csv"
	case ".ndjson", ".jsonl":
		return "ndjson"
	case ".ics", ".ical":
		return "ics"
	}
	return ""
}

// Row is one valid row: a validated command, normalised (UTC times,
// canonical metadata), and its fingerprint.
type Row struct {
	Line        int // 0 for commands that come from no line (CalendarUpserts)
	Cmd         actor.Command
	Fingerprint string
}

// BadRow is an invalid row and why.
type BadRow struct {
	Line   int
	Reason string
}

// BookingRow builds and validates the booking.create command of one row.
// Its request id is derived from its content: the same row always makes the
// same command, whichever file or line it comes from.
func BookingRow(line int, calID string, b actor.BookingSpec) (Row, *BadRow) {
	cmd := actor.Command{V: actor.SchemaVersion, Type: actor.TypeBookingCreate, RequestID: "imp.0", CalendarID: calID, Booking: &b}
	if calID == "" {
		return Row{}, &BadRow{line, "calendar_id: is empty and no --calendar was given"}
	}
	if errs := cmd.Validate(); len(errs) > 0 { // also normalises: UTC, canonical metadata
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Field + ": " + e.Message
		}
		return Row{}, &BadRow{line, strings.Join(msgs, "; ")}
	}
	fp := cmd.Fingerprint()
	cmd.RequestID = "imp." + fp
	return Row{Line: line, Cmd: cmd, Fingerprint: fp}, nil
}

// parseTime parses an RFC 3339 time; empty gives the zero time, which
// validation reports as missing.
func parseTime(field, s string) (time.Time, error) {
	if s = strings.TrimSpace(s); s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q is not an RFC 3339 time (e.g. 2026-12-01T10:00:00Z)", field, s)
	}
	return t, nil
}

// mergeMetadata returns the metadata object: the explicit object (raw,
// may be empty) over the extra fields.
func mergeMetadata(raw []byte, extra map[string]json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(extra) == 0 {
		return raw, nil // validation checks and canonicalises it
	}
	obj := map[string]json.RawMessage{}
	if len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return nil, errors.New("metadata: must be a JSON object")
		}
	}
	for k, v := range extra {
		if _, ok := obj[k]; !ok {
			obj[k] = v
		}
	}
	return json.Marshal(obj)
}

// Dedupe drops rows whose command (request id) appeared earlier in the
// file: identical rows are the same intent.
func Dedupe(rows []Row) (unique []Row, dups int) {
	seen := make(map[string]struct{}, len(rows))
	unique = rows[:0:0]
	for _, r := range rows {
		key := r.Cmd.CalendarID + "/" + r.Cmd.RequestID
		if _, ok := seen[key]; ok {
			dups++
			continue
		}
		seen[key] = struct{}{}
		unique = append(unique, r)
	}
	return unique, dups
}

// CalendarUpserts makes one calendar.upsert per distinct calendar id, in id
// order, with a content-derived request id (a re-run is a duplicate, not a
// second overwrite).
func CalendarUpserts(rows []Row) []Row {
	ids := map[string]bool{}
	for _, r := range rows {
		ids[r.Cmd.CalendarID] = true
	}
	out := make([]Row, 0, len(ids))
	for id := range ids {
		cmd := actor.Command{V: actor.SchemaVersion, Type: actor.TypeCalendarUpsert, RequestID: "imp.0", CalendarID: id,
			Calendar: &actor.CalendarSpec{Name: id, Timezone: "UTC"}}
		_ = cmd.Validate() // ids were validated with their rows
		fp := cmd.Fingerprint()
		cmd.RequestID = "imp." + fp
		out = append(out, Row{Cmd: cmd, Fingerprint: fp})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cmd.CalendarID < out[j].Cmd.CalendarID })
	return out
}
