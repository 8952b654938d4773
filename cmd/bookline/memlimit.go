package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultMemoryLimit is bookline serve's soft memory limit for the Go
// runtime when neither --memory-limit nor GOMEMLIMIT is given: none. A limit
// keeps the heap from growing to twice the live heap (GOGC=100), but near it
// the GC runs continuously: importing 1M commands (live heap 300-500 MB
// while the writers commit large batches and JetStream holds the dedupe
// window's ids) took 3.1x longer with 256MiB and 1.9x longer with 512MiB
// than without (docs/benchmarks.md). Set it where memory matters more.
const defaultMemoryLimit = 0

// memoryLimit is the --memory-limit flag: a byte count with an optional
// unit (B, KiB, MiB, GiB, TiB, as GOMEMLIMIT), 0 or "off" for no limit. It
// remembers whether it was set (command line, environment or config file),
// because an unset flag leaves a GOMEMLIMIT of the environment alone.
type memoryLimit struct {
	bytes int64 // 0 = off
	set   bool
}

func (m *memoryLimit) String() string {
	if m == nil {
		return ""
	}
	return formatBytes(m.bytes)
}

func (m *memoryLimit) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	m.bytes, m.set = n, true
	return nil
}

// apply sets the runtime's soft memory limit and says what it did. An
// explicit --memory-limit wins over GOMEMLIMIT; without one, a GOMEMLIMIT in
// the environment is kept (the runtime read it at start).
func (m *memoryLimit) apply() string {
	if !m.set {
		if env := os.Getenv("GOMEMLIMIT"); env != "" {
			return "GOMEMLIMIT=" + env + " (from the environment)"
		}
	}
	if m.bytes == 0 {
		debug.SetMemoryLimit(math.MaxInt64)
		return "off"
	}
	debug.SetMemoryLimit(m.bytes)
	return formatBytes(m.bytes)
}

var byteUnits = []struct {
	suffix string
	shift  uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}

// parseBytes reads "0", "off", "268435456", "256MiB", "1.5GiB".
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "off" || s == "0" {
		return 0, nil
	}
	num, shift := s, uint(0)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = strings.TrimSpace(rest), u.shift
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q: want a size such as 256MiB, 1GiB or 0 (off)", s)
	}
	v := f * float64(uint64(1)<<shift)
	switch {
	case v < 0:
		return 0, errors.New("must not be negative")
	case v >= math.MaxInt64:
		return 0, fmt.Errorf("%q: too large", s)
	case v > 0 && v < 1<<20:
		return 0, fmt.Errorf("%q: below 1MiB; use 0 for no limit", s)
	}
	return int64(v), nil
}

// formatBytes prints n in the largest unit that divides it.
func formatBytes(n int64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range byteUnits {
		if u.shift > 0 && n%(int64(1)<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
