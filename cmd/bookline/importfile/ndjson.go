package importfile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/bookline/bookline/actor"
)

// ParseNDJSON reads one JSON object per line, with the fields of ParseCSV's
// columns, as booking.create commands; defCal is the calendar of rows
// without one. Blank lines are skipped, invalid rows come back in bad; err
// is a read error.
func ParseNDJSON(r io.Reader, defCal string) (rows []Row, bad []BadRow, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		text, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, err
		}
		if t := bytes.TrimSpace(text); len(t) > 0 {
			if row, b := ndjsonRow(line, t, defCal); b != nil {
				bad = append(bad, *b)
			} else {
				rows = append(rows, row)
			}
		}
		if err != nil {
			return rows, bad, nil
		}
	}
}

func ndjsonRow(line int, text []byte, defCal string) (Row, *BadRow) {
	fail := func(format string, a ...any) (Row, *BadRow) {
		return Row{}, &BadRow{line, fmt.Sprintf(format, a...)}
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return fail("not a JSON object")
	}
	if dec.InputOffset() != int64(len(text)) {
		return fail("trailing data after the JSON object")
	}
	str := func(name string) (string, error) {
		raw, ok := obj[name]
		delete(obj, name)
		if !ok || bytes.Equal(raw, []byte("null")) {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%s: must be a string", name)
		}
		return s, nil
	}
	var b actor.BookingSpec
	cal, err := str("calendar_id")
	var start, end string
	if err == nil {
		start, err = str("start")
	}
	if err == nil {
		end, err = str("end")
	}
	if err == nil {
		b.Customer, err = str("customer")
	}
	if err == nil {
		b.Start, err = parseTime("start", start)
	}
	if err == nil {
		b.End, err = parseTime("end", end)
	}
	if err != nil {
		return fail("%v", err)
	}
	md := obj["metadata"]
	delete(obj, "metadata")
	if b.Metadata, err = mergeMetadata(md, obj); err != nil {
		return fail("%v", err)
	}
	if cal == "" {
		cal = defCal
	}
	row, br := BookingRow(line, cal, b)
	return row, br
}
