package importfile

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/bookline/bookline/actor"
)

// ParseCSV reads CSV with a header row (columns calendar_id, start, end,
// customer, metadata; every other column goes into metadata) as
// booking.create commands; defCal is the calendar of rows without one.
// Invalid rows come back in bad; err means the input as a whole cannot be
// read (no header row, a required column missing, a read error).
func ParseCSV(r io.Reader, defCal string) (rows []Row, bad []BadRow, err error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the header row: %w", err)
	}
	col := map[string]int{}
	var extras []int
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		header[i] = h
		switch h {
		case "calendar_id", "start", "end", "customer", "metadata":
			col[h] = i
		default:
			if h != "" {
				extras = append(extras, i)
			}
		}
	}
	header = append([]string(nil), header...) // ReuseRecord
	for _, need := range []string{"start", "end", "customer"} {
		if _, ok := col[need]; !ok {
			return nil, nil, fmt.Errorf("header row has no %q column (want calendar_id,start,end,customer[,metadata,...])", need)
		}
	}
	if _, ok := col["calendar_id"]; !ok && defCal == "" {
		return nil, nil, errors.New(`header row has no "calendar_id" column and no --calendar was given`)
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, bad, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				bad = append(bad, BadRow{pe.StartLine, pe.Err.Error()})
				continue
			}
			return nil, nil, err
		}
		line, _ := cr.FieldPos(0)
		get := func(name string) string {
			if i, ok := col[name]; ok && i < len(rec) {
				return rec[i]
			}
			return ""
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue // blank line
		}
		if len(rec) != len(header) {
			bad = append(bad, BadRow{line, fmt.Sprintf("has %d fields, the header has %d", len(rec), len(header))})
			continue
		}
		var b actor.BookingSpec
		var perr error
		var extra map[string]json.RawMessage
		for _, i := range extras {
			if v := rec[i]; v != "" {
				if extra == nil {
					extra = map[string]json.RawMessage{}
				}
				extra[header[i]], _ = json.Marshal(v)
			}
		}
		if b.Start, perr = parseTime("start", get("start")); perr == nil {
			if b.End, perr = parseTime("end", get("end")); perr == nil {
				b.Metadata, perr = mergeMetadata([]byte(get("metadata")), extra)
			}
		}
		if perr != nil {
			bad = append(bad, BadRow{line, perr.Error()})
			continue
		}
		b.Customer = get("customer")
		cal := strings.TrimSpace(get("calendar_id"))
		if cal == "" {
			cal = defCal
		}
		if row, br := BookingRow(line, cal, b); br != nil {
			bad = append(bad, *br)
		} else {
			rows = append(rows, row)
		}
	}
}
