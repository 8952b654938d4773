package actor_test

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// tzif is a minimal TZif file (version 1, no transitions) of a zone that is
// always at offset off with abbreviation abbr.
func tzif(off int32, abbr string) []byte {
	b := append([]byte("TZif\x00"), make([]byte, 15)...)
	// isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt
	for _, n := range []uint32{0, 0, 0, 0, 1, uint32(len(abbr) + 1)} {
		b = binary.BigEndian.AppendUint32(b, n)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(off))
	b = append(b, 0, 0) // not DST, abbreviation at 0
	return append(append(b, abbr...), 0)
}

// writeFakeZoneinfo writes a zoneinfo.zip in the layout Go reads from
// $ZONEINFO, whose Europe/Berlin is really UTC+9 all year and which has a
// zone, Mars/Olympus, that the IANA data does not.
func writeFakeZoneinfo(t *testing.T, path string) {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, tz := range map[string][]byte{"Europe/Berlin": tzif(9*3600, "JST"), "Mars/Olympus": tzif(0, "MAR")} {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(tz); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// zoneScenario decides a few commands whose outcome depends on the rules of
// Europe/Berlin and on which zone names exist, and returns the replies.
func zoneScenario(tb testing.TB) []byte {
	tb.Helper()
	s := datatest.MustOpen(tb)
	mon := map[string][]data.TimeRange{"mon": {{Start: "09:00", End: "17:00"}}}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	monday := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	cmds := []actor.Command{
		calendarCmd("berlin", "Europe/Berlin", data.Rules{WeeklyHours: mon, SlotStepMinutes: 60}),
		bookingCmd("berlin", monday.Add(8*time.Hour), time.Hour),  // 09:00 in Berlin, 17:00 at UTC+9
		bookingCmd("berlin", monday.Add(15*time.Hour), time.Hour), // 16:00 in Berlin, 00:00 at UTC+9
		bookingCmd("berlin", monday.Add(16*time.Hour), time.Hour), // 17:00 in Berlin: closed
		calendarCmd("mars", "Mars/Olympus", data.Rules{}),
	}
	var out []byte
	for i, cmd := range cmds {
		cmd.V, cmd.RequestID = actor.SchemaVersion, "z"+string(rune('a'+i))
		b := mustJSON(tb, cmd)
		o := applyInputs(tb, s, 0, actor.Input{Seq: uint64(i + 1), At: now, SubjectCalendar: cmd.CalendarID, Data: []byte(b)})[0]
		out = append(append(out, o.Reply...), '\n')
	}
	return out
}

// TestTimeZonesIgnoreHost: decisions use only the time zone data built into
// bookline. A $ZONEINFO whose Europe/Berlin is another zone, and which has
// a zone the IANA data does not, changes no decision. It runs the scenario
// in a child process, since Go reads $ZONEINFO once per process.
func TestTimeZonesIgnoreHost(t *testing.T) {
	if out := os.Getenv("BOOKLINE_TEST_ZONE_SCENARIO_OUT"); out != "" {
		if err := os.WriteFile(out, zoneScenario(t), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	dir := t.TempDir()
	fake, out := filepath.Join(dir, "zoneinfo.zip"), filepath.Join(dir, "replies")
	writeFakeZoneinfo(t, fake)
	cmd := exec.Command(os.Args[0], "-test.run=^TestTimeZonesIgnoreHost$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ZONEINFO="+fake, "BOOKLINE_TEST_ZONE_SCENARIO_OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := zoneScenario(t)
	if !bytes.Equal(got, want) {
		t.Fatalf("with ZONEINFO=%s the replies were\n%s\nwithout\n%s", fake, got, want)
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	for i, code := range []string{"", "", "", actor.CodeOutsideHours, actor.CodeInvalidRequest} {
		wantCode(t, decodeReply(t, []byte(lines[i])), code)
	}
}
