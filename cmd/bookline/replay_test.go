package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/data"
)

var natsURLRe = regexp.MustCompile(`msg="embedded nats listening" url=(\S+)`)

func runMain(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

// TestReplayAndVerify: a replay of a live server's stream equals the live
// index (verify exits 0); a tampered index is caught (verify exits 1 and
// names the calendar).
func TestReplayAndVerify(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	args := []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--partitions", "4"}
	p := startProc(t, args...)
	m := natsURLRe.FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("no nats url in logs:\n%s", p.output())
	}
	natsURL := m[1]
	for _, c := range []string{"v1", "v2", "v3"} {
		req, _ := http.NewRequest("PUT", p.URL+"/v1/calendars/"+c, strings.NewReader(`{"timezone":"Europe/Berlin"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for i := 0; i < 20; i++ { // every other one overlaps its predecessor: 10 per calendar
			start := time.Date(2027, 2, 1, 8, 0, 0, 0, time.UTC).Add(time.Duration(i*45) * time.Minute)
			body := fmt.Sprintf(`{"start":%q,"end":%q,"customer":"c%d"}`, start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339), i)
			if _, _, err := post(p.URL+"/v1/calendars/"+c+"/bookings", body); err != nil {
				t.Fatal(err)
			}
		}
	}

	code, out, errs := runMain("verify", "--url", p.URL, "--nats-url", natsURL)
	if code != 0 || !strings.Contains(out, "ok: live index equals a replay") {
		t.Fatalf("verify live: exit %d\n%s\n%s", code, out, errs)
	}
	replayDir := t.TempDir()
	code, out, errs = runMain("replay", "--data-dir", replayDir, "--nats-url", natsURL)
	if code != 0 || !strings.Contains(out, "digest ") || !strings.Contains(errs, "commands/s") {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "calendars 3, bookings 30 (confirmed 30)") {
		t.Errorf("replay summary: %s", out)
	}
	// Replaying into a directory that has an index is refused.
	if code, _, errs = runMain("replay", "--data-dir", replayDir, "--nats-url", natsURL); code == 0 {
		t.Fatalf("second replay into the same dir succeeded: %s", errs)
	}
	// Point in time: up to the calendar upsert of v1 and nothing else
	// (after the schema version 2 markers of the 4 partitions).
	code, out, _ = runMain("replay", "--data-dir", t.TempDir(), "--nats-url", natsURL, "--to-seq", "5")
	if code != 0 || !strings.Contains(out, "calendars 1, bookings 0") {
		t.Fatalf("--to-seq 5: exit %d %s", code, out)
	}

	// Stop the server, tamper with its index, verify offline.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runMain("verify", "--data-dir", dir, "--source-dir", dir)
	if code != 0 {
		t.Fatalf("offline verify of an untouched index: %d\n%s\n%s", code, out, errs)
	}
	store, err := data.Open(filepath.Join(dir, "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	err = store.Commit(func(tx *data.Tx) error {
		bks, _, err := tx.ListBookings("v2", time.Time{}, time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), 1, nil)
		if err != nil || len(bks) == 0 {
			return fmt.Errorf("no booking to tamper with: %v", err)
		}
		bks[0].Status = data.StatusCancelled
		return tx.PutBooking(bks[0])
	})
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs = runMain("verify", "--data-dir", dir, "--source-dir", dir)
	if code == 0 || !strings.Contains(out, `first differing calendar "v2"`) {
		t.Fatalf("verify of a tampered index: exit %d\n%s\n%s", code, out, errs)
	}

	// An index decided (also) with other time zone data is told apart.
	if store, err = data.Open(filepath.Join(dir, "index.db")); err != nil {
		t.Fatal(err)
	}
	err = store.Commit(func(tx *data.Tx) error { _, err := tx.NoteTzdata("1999z"); return err })
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs = runMain("verify", "--data-dir", dir, "--source-dir", dir)
	if want := "time zone data: the live index was decided with " + zones.Version + ",1999z, this replay with " + zones.Version; code == 0 || !strings.Contains(out, want) {
		t.Fatalf("verify of an index of other time zone data: exit %d, want %q\n%s\n%s", code, want, out, errs)
	}
}
