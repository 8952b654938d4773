package importfile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/actor/zones"
)

// ParseICS reads the VEVENTs of an iCalendar file (RFC 5545) as bookings of
// calID. Events it cannot book (all-day, recurring, cancelled, floating
// times) come back in bad; err is a read error.
func ParseICS(r io.Reader, calID string) (rows []Row, bad []BadRow, err error) {
	type prop struct {
		line   int
		name   string
		params map[string]string
		value  string
	}
	// Unfold: a line starting with a space or tab continues the previous one.
	var props []prop
	var cur strings.Builder
	curLine := 0
	flush := func() {
		if curLine > 0 && cur.Len() > 0 {
			p := prop{line: curLine}
			p.name, p.params, p.value = parseICSLine(cur.String())
			props = append(props, p)
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimRight(sc.Text(), "\r")
		if strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") {
			cur.WriteString(l[1:])
			continue
		}
		flush()
		cur.WriteString(l)
		curLine = n
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}

	var ev map[string]prop // properties of the open VEVENT
	evLine, depth := 0, 0  // depth of components nested in the VEVENT (VALARM)
	for _, p := range props {
		switch {
		case p.name == "BEGIN" && strings.EqualFold(p.value, "VEVENT") && ev == nil:
			ev, evLine, depth = map[string]prop{}, p.line, 0
		case ev == nil:
		case p.name == "BEGIN":
			depth++
		case p.name == "END" && depth > 0:
			depth--
		case p.name == "END" && strings.EqualFold(p.value, "VEVENT"):
			if row, b := icsEvent(evLine, calID, func(name string) (string, map[string]string, bool) {
				q, ok := ev[name]
				return q.value, q.params, ok
			}); b != nil {
				bad = append(bad, *b)
			} else {
				rows = append(rows, row)
			}
			ev = nil
		case depth == 0:
			if _, seen := ev[p.name]; !seen {
				ev[p.name] = p
			}
		}
	}
	if ev != nil {
		bad = append(bad, BadRow{evLine, "VEVENT without END:VEVENT"})
	}
	return rows, bad, nil
}

// parseICSLine splits a content line NAME;P=V;P="V":VALUE.
func parseICSLine(l string) (name string, params map[string]string, value string) {
	inQuote := false
	end := len(l)
	for i := 0; i < len(l); i++ {
		if l[i] == '"' {
			inQuote = !inQuote
		} else if l[i] == ':' && !inQuote {
			end = i
			break
		}
	}
	head := l[:end]
	if end < len(l) {
		value = l[end+1:]
	}
	parts := strings.Split(head, ";")
	name = strings.ToUpper(parts[0])
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		if params == nil {
			params = map[string]string{}
		}
		params[strings.ToUpper(k)] = strings.Trim(v, `"`)
	}
	return name, params, value
}

func icsEvent(line int, calID string, get func(string) (string, map[string]string, bool)) (Row, *BadRow) {
	fail := func(format string, a ...any) (Row, *BadRow) {
		return Row{}, &BadRow{line, fmt.Sprintf(format, a...)}
	}
	if _, _, ok := get("RRULE"); ok {
		return fail("recurring events (RRULE) are not supported")
	}
	if st, _, _ := get("STATUS"); strings.EqualFold(st, "CANCELLED") {
		return fail("cancelled event")
	}
	var b actor.BookingSpec
	var err error
	if b.Start, err = icsTime(get, "DTSTART"); err != nil {
		return fail("%v", err)
	}
	if _, _, ok := get("DTEND"); ok {
		if b.End, err = icsTime(get, "DTEND"); err != nil {
			return fail("%v", err)
		}
	} else if dur, _, ok := get("DURATION"); ok {
		d, err := parseICSDuration(dur)
		if err != nil {
			return fail("DURATION: %v", err)
		}
		b.End = b.Start.Add(d)
	}
	summary, _, _ := get("SUMMARY")
	b.Customer = icsUnescape(summary)
	if uid, _, ok := get("UID"); ok && uid != "" {
		b.Metadata, _ = json.Marshal(map[string]string{"ics_uid": uid})
	}
	return BookingRow(line, calID, b)
}

func icsTime(get func(string) (string, map[string]string, bool), name string) (time.Time, error) {
	v, params, ok := get(name)
	if !ok {
		return time.Time{}, nil // reported as missing by validation
	}
	if strings.EqualFold(params["VALUE"], "DATE") || len(v) == 8 {
		return time.Time{}, fmt.Errorf("%s: all-day events (dates without a time) are not supported", name)
	}
	if strings.HasSuffix(v, "Z") {
		t, err := time.Parse("20060102T150405Z", v)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s: %q is not a UTC date-time (e.g. 20261201T100000Z)", name, v)
		}
		return t, nil
	}
	tzid := params["TZID"]
	if tzid == "" {
		return time.Time{}, fmt.Errorf("%s: floating time %q: needs a Z suffix or TZID", name, v)
	}
	loc, err := zones.Load(tzid)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: TZID %q is not an IANA time zone", name, tzid)
	}
	t, err := time.ParseInLocation("20060102T150405", v, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q is not a date-time (e.g. 20261201T100000)", name, v)
	}
	return t, nil
}

// parseICSDuration parses an RFC 5545 duration: P[nW] or P[nD][T[nH][nM][nS]].
func parseICSDuration(s string) (time.Duration, error) {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(strings.ToUpper(s), "+"), "P")
	if !ok || rest == "" || strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("%q is not a positive duration (e.g. PT1H30M)", s)
	}
	var d time.Duration
	inTime := false
	num := ""
	for _, c := range rest {
		switch {
		case c >= '0' && c <= '9':
			num += string(c)
		case c == 'T' && num == "":
			inTime = true
		default:
			n, err := strconv.Atoi(num)
			if err != nil {
				return 0, fmt.Errorf("%q is not a duration", s)
			}
			unit := map[rune]time.Duration{'W': 7 * 24 * time.Hour, 'D': 24 * time.Hour}
			if inTime {
				unit = map[rune]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second}
			}
			u, ok := unit[c]
			if !ok {
				return 0, fmt.Errorf("%q is not a duration", s)
			}
			d += time.Duration(n) * u
			num = ""
		}
	}
	if num != "" {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	return d, nil
}

func icsUnescape(s string) string {
	return strings.NewReplacer(`\\`, `\`, `\;`, `;`, `\,`, `,`, `\n`, "\n", `\N`, "\n").Replace(s)
}
