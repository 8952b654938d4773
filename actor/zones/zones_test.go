package zones

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedDataMatchesVersion: zoneinfo.zip is the file version.go
// describes. Replace both with go generate, never one alone.
func TestEmbeddedDataMatchesVersion(t *testing.T) {
	sum := sha256.Sum256(zipData)
	if got := hex.EncodeToString(sum[:]); got != zipSHA256 {
		t.Fatalf("zoneinfo.zip has SHA-256 %s, version.go says %s: run go generate ./actor/zones", got, zipSHA256)
	}
	if !regexp.MustCompile(`^\d{4}[a-z]$`).MatchString(Version) {
		t.Fatalf("Version %q is not an IANA release name", Version)
	}
}

// TestSameDataAsGoRelease: when the Go toolchain running the test ships the
// same tzdata release, its zoneinfo.zip is byte for byte the embedded one.
// A toolchain with another release is reported, not failed: moving to it
// changes decisions, so it is done on purpose (go generate).
func TestSameDataAsGoRelease(t *testing.T) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("go env GOROOT: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "lib", "time")
	script, err := os.ReadFile(filepath.Join(dir, "update.bash"))
	if err != nil {
		t.Skipf("no Go tzdata to compare with: %v", err)
	}
	m := regexp.MustCompile(`(?m)^DATA=(\S+)`).FindSubmatch(script)
	if m == nil {
		t.Skip("update.bash names no DATA release")
	}
	if string(m[1]) != Version {
		t.Logf("Go's toolchain ships tzdata %s, bookline embeds %s (go generate ./actor/zones to move)", m[1], Version)
		return
	}
	goZip, err := os.ReadFile(filepath.Join(dir, "zoneinfo.zip"))
	if err != nil {
		t.Skip(err)
	}
	if !bytes.Equal(goZip, zipData) {
		t.Fatalf("Go's zoneinfo.zip of tzdata %s differs from the embedded one: run go generate ./actor/zones", Version)
	}
}

func TestLoad(t *testing.T) {
	for _, name := range []string{"", "UTC"} {
		if l, err := Load(name); err != nil || l != time.UTC {
			t.Errorf("Load(%q) = %v, %v", name, l, err)
		}
	}
	for _, name := range []string{"Local", "Mars/Olympus", "../../etc/passwd", "/usr/share/zoneinfo/UTC", "europe/berlin", "Europe/"} {
		if _, err := Load(name); !errors.Is(err, ErrUnknownZone) {
			t.Errorf("Load(%q): %v, want ErrUnknownZone", name, err)
		}
	}
	berlin, err := Load("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if berlin.String() != "Europe/Berlin" {
		t.Errorf("name %q", berlin)
	}
	for _, c := range []struct {
		utc  time.Time
		want string
	}{
		{time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC), "13:00 CET"},
		{time.Date(2026, 7, 15, 12, 0, 0, 0, time.UTC), "14:00 CEST"},
		{time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), "03:00 CEST"}, // spring forward
	} {
		if got := c.utc.In(berlin).Format("15:04 MST"); got != c.want {
			t.Errorf("%s in Berlin: %s, want %s", c.utc, got, c.want)
		}
	}
	if again, _ := Load("Europe/Berlin"); again != berlin {
		t.Error("a zone is loaded once")
	}
	// Zones and links (backward names) of the database.
	for _, name := range []string{"America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Europe/Kyiv", "US/Eastern", "Etc/GMT+5"} {
		if _, err := Load(name); err != nil {
			t.Errorf("Load(%q): %v", name, err)
		}
	}
}
