package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
)

// TestSnapshotTrimVerifyReplay: with snapshots and a bounded stream,
// `bookline snapshot` stores a snapshot and trims the stream below it; a
// full replay of what is left is refused and says how to go on; verify and
// replay --from-snapshot reach the live state from the snapshot and the
// stream after it; a server started on an empty index restores it.
func TestSnapshotTrimVerifyReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	args := []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--partitions", "2",
		"--snapshot-every", "1000000", "--stream-max-age", "1ms", "--stream-trim-grace", "1ns"}
	p := startProc(t, args...)
	m := natsURLRe.FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("no nats url in logs:\n%s", p.output())
	}
	natsURL := m[1]
	book := func(cal string, from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			start := time.Date(2027, 2, 1, 8, 0, 0, 0, time.UTC).Add(time.Duration(i*45) * time.Minute)
			body := fmt.Sprintf(`{"start":%q,"end":%q,"customer":"c%d"}`, start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339), i)
			if code, b, err := post(p.URL+"/v1/calendars/"+cal+"/bookings", body); err != nil || code/100 != 2 && code != 409 {
				t.Fatalf("book: %d %s %v", code, b, err)
			}
		}
	}
	for _, c := range []string{"s1", "s2", "s3"} {
		if code, b := httpDo(t, "PUT", p.URL+"/v1/calendars/"+c, "", `{"timezone":"Europe/Berlin"}`); code != 200 && code != 201 {
			t.Fatalf("put calendar: %d %s", code, b)
		}
		book(c, 0, 10)
	}
	code, out, errs := runMain("snapshot", "--url", p.URL)
	if code != 0 || !strings.Contains(out, "index-") {
		t.Fatalf("snapshot: exit %d\n%s\n%s", code, out, errs)
	}
	for _, c := range []string{"s1", "s2", "s3"} {
		book(c, 10, 10)
	}
	if code, out, errs = runMain("snapshot", "--url", p.URL); code != 0 {
		t.Fatalf("second snapshot: exit %d\n%s\n%s", code, out, errs)
	}
	for _, c := range []string{"s1", "s2"} {
		book(c, 20, 5) // the tail after the newest snapshot
	}
	code, out, errs = runMain("snapshot", "--url", p.URL, "--list", "--json")
	var list struct {
		Snapshots []data.SnapshotInfo `json:"snapshots"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Snapshots) != 2 {
		t.Fatalf("list: exit %d %v\n%s\n%s", code, err, out, errs)
	}
	if !strings.Contains(p.output(), "command stream trimmed") {
		t.Fatalf("no trim logged:\n%s", p.output())
	}
	code, metrics := httpDo(t, "GET", p.URL+"/metrics", "", "")
	if code != 200 || !strings.Contains(string(metrics), "bookline_snapshot_duration_seconds_count 2") {
		t.Fatalf("metrics: %d\n%s", code, metrics)
	}

	// The full replay cannot be built any more, and says what to do.
	code, _, errs = runMain("replay", "--data-dir", t.TempDir(), "--nats-url", natsURL)
	if code == 0 || !strings.Contains(errs, "no longer has") {
		t.Fatalf("full replay of a trimmed stream: exit %d\n%s", code, errs)
	}
	code, out, errs = runMain("verify", "--url", p.URL, "--nats-url", natsURL)
	if code == 0 || !strings.Contains(errs, "--from-snapshot") {
		t.Fatalf("verify without --from-snapshot: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = runMain("verify", "--url", p.URL, "--nats-url", natsURL, "--from-snapshot")
	if code != 0 || !strings.Contains(out, "ok: live index equals") || !strings.Contains(errs, "comparing with snapshot") {
		t.Fatalf("verify --from-snapshot: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = runMain("replay", "--data-dir", t.TempDir(), "--nats-url", natsURL, "--from-snapshot")
	if code != 0 || !strings.Contains(out, "calendars 3") || !strings.Contains(errs, "restored snapshot") {
		t.Fatalf("replay --from-snapshot: exit %d\n%s\n%s", code, out, errs)
	}
	code, live := httpDo(t, "GET", p.URL+"/v1/admin/digest", "", "")
	if code != 200 {
		t.Fatalf("digest: %d", code)
	}
	var want data.Digest
	if err := json.Unmarshal(live, &want); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, want.Total) {
		t.Fatalf("replay --from-snapshot digest differs from live %s:\n%s", want.Total, out)
	}

	// A lost index comes back from the snapshot and the tail.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatal(err)
	}
	if err := data.RemoveIndex(dir + "/index.db"); err != nil {
		t.Fatal(err)
	}
	p = startProc(t, args...)
	if !strings.Contains(p.output(), "index restored from a snapshot") {
		t.Fatalf("no restore:\n%s", p.output())
	}
	code, live = httpDo(t, "GET", p.URL+"/v1/admin/digest", "", "")
	var got data.Digest
	if err := json.Unmarshal(live, &got); code != http.StatusOK || err != nil || got.Total != want.Total {
		t.Fatalf("digest after restore %s, before %s (%d %v)", got.Total, want.Total, code, err)
	}
}
