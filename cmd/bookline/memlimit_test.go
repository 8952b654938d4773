package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"0":          0,
		"off":        0,
		"0MiB":       0,
		"268435456":  256 << 20,
		"256MiB":     256 << 20,
		" 512 MiB ":  512 << 20,
		"1GiB":       1 << 30,
		"1.5GiB":     3 << 29,
		"2048KiB":    2 << 20,
		"1048576B":   1 << 20,
		"1TiB":       1 << 40,
		"123456789B": 123456789,
	} {
		got, err := parseBytes(in)
		if err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "256MB", "256mib", "-1", "-1GiB", "1KiB", "NaN", "Inf", "1e30GiB", "lots"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", in, got)
		}
	}
	for n, want := range map[int64]string{0: "0", 256 << 20: "256MiB", 3 << 29: "1536MiB", 1 << 40: "1TiB", 1<<20 + 1: "1048577"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
		if n == 0 {
			continue
		}
		if back, err := parseBytes(formatBytes(n)); err != nil || back != n {
			t.Errorf("round trip of %d: %d, %v", n, back, err)
		}
	}
}

// TestMemoryLimitFlag: the flag reads the command line, BOOKLINE_MEMORY_LIMIT
// and the config file, remembers that it was set, and apply gives an
// explicit value precedence over GOMEMLIMIT but keeps GOMEMLIMIT otherwise.
func TestMemoryLimitFlag(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	parse := func(args ...string) (*memoryLimit, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		m := &memoryLimit{bytes: defaultMemoryLimit}
		fs.Var(m, "memory-limit", "")
		fs.String("config", "", "")
		return m, parseFlagsWithConfig(fs, args, "config")
	}

	t.Setenv("GOMEMLIMIT", "")
	m, err := parse()
	if err != nil || m.set || m.bytes != defaultMemoryLimit {
		t.Fatalf("default: %+v %v", m, err)
	}
	if got := m.apply(); got != "off" || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("default apply: %s, limit %d", got, debug.SetMemoryLimit(-1))
	}
	if m256, err := parse("--memory-limit", "256MiB"); err != nil || !m256.set {
		t.Fatalf("--memory-limit 256MiB: %+v %v", m256, err)
	} else if got := m256.apply(); got != "256MiB" || debug.SetMemoryLimit(-1) != 256<<20 {
		t.Fatalf("--memory-limit 256MiB apply: %s, limit %d", got, debug.SetMemoryLimit(-1))
	}

	t.Setenv("GOMEMLIMIT", "1GiB")
	if got := m.apply(); !strings.Contains(got, "GOMEMLIMIT=1GiB") {
		t.Fatalf("unset flag with GOMEMLIMIT: %s", got)
	}
	if m, err = parse("--memory-limit", "0"); err != nil || !m.set {
		t.Fatalf("--memory-limit 0: %+v %v", m, err)
	}
	if got := m.apply(); got != "off" || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("--memory-limit 0 apply: %s, limit %d", got, debug.SetMemoryLimit(-1))
	}

	t.Setenv("BOOKLINE_MEMORY_LIMIT", "1GiB")
	if m, err = parse(); err != nil || !m.set || m.bytes != 1<<30 {
		t.Fatalf("from the environment: %+v %v", m, err)
	}
	if m, err = parse("--memory-limit", "300MiB"); err != nil || m.bytes != 300<<20 {
		t.Fatalf("command line over environment: %+v %v", m, err)
	}
	t.Setenv("BOOKLINE_MEMORY_LIMIT", "lots")
	if _, err = parse(); err == nil || !strings.Contains(err.Error(), "BOOKLINE_MEMORY_LIMIT") {
		t.Fatalf("bad environment value: %v", err)
	}
	os.Unsetenv("BOOKLINE_MEMORY_LIMIT")

	cfg := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(cfg, []byte(`{"memory-limit": 536870912}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, err = parse("--config", cfg); err != nil || !m.set || m.bytes != 512<<20 {
		t.Fatalf("from the config file: %+v %v", m, err)
	}
}

func TestServeMemoryLimitErrors(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"lots", "-5MiB", "10KiB"} {
		var out, errb bytes.Buffer
		args := []string{"serve", "--data-dir", filepath.Join(dir, "d"), "--nats-listen", "", "--memory-limit", v}
		if code := Main(context.Background(), args, &out, &errb); code == 0 || !strings.Contains(errb.String(), "memory-limit") {
			t.Errorf("--memory-limit %s: exit %d:\n%s", v, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if Main(context.Background(), []string{"serve", "--help"}, &out, &errb); !strings.Contains(errb.String(), "--memory-limit") ||
		!strings.Contains(errb.String(), "BOOKLINE_MEMORY_LIMIT") || !strings.Contains(errb.String(), "0 = off") {
		t.Errorf("help lacks --memory-limit:\n%s", errb.String())
	}
}
