// Package zones loads time zones from the IANA time zone database built
// into bookline, never from the host.
//
// Opening hours, the slot grid, DST and whether a zone name exists are part
// of every decision, and decisions must be the same on every instance, in
// every replay and after every rebuild. time.LoadLocation reads $ZONEINFO
// and the system's zoneinfo first (time/tzdata is only its fallback), so two
// hosts with different OS images, or one host before and after an OS
// update, could decide the same log differently. Load reads only
// zoneinfo.zip, embedded here: the data of one release (Version), the same
// file time/tzdata embeds, copied from the Go toolchain by gen.go.
//
// Changing the data (go generate, after a Go upgrade) changes decisions for
// calendars whose zone rules changed between the releases. The index
// records which releases decided it (data.Tx.TzdataVersions); serve
// reports an index decided with another release at start, and the digest
// carries the releases, so verify tells them apart.
package zones

import (
	"archive/zip"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"
)

//go:generate go run gen.go

//go:embed zoneinfo.zip
var zipData []byte

var (
	indexOnce sync.Once
	index     map[string][]byte // zone name -> TZif data (slices of zipData)
	indexErr  error
	locations sync.Map // zone name -> *time.Location
)

// ErrUnknownZone is returned by Load for a name the database does not have.
var ErrUnknownZone = errors.New("zones: unknown time zone")

// Load returns the time zone called name from the built-in database. ""
// and "UTC" are UTC. "Local" (the host's zone) is refused, and so is every
// name the database does not have, whatever the host has.
func Load(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("%w: %q (the host's zone) is not a zone name", ErrUnknownZone, name)
	}
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location), nil
	}
	indexOnce.Do(func() { index, indexErr = readIndex(zipData) })
	if indexErr != nil {
		return nil, indexErr
	}
	tz, ok := index[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownZone, name)
	}
	l, err := time.LoadLocationFromTZData(name, tz)
	if err != nil {
		return nil, fmt.Errorf("zones: %q: %w", name, err)
	}
	l2, _ := locations.LoadOrStore(name, l)
	return l2.(*time.Location), nil
}

// readIndex maps every file of the zip (stored, not compressed, as Go
// writes it) to its bytes inside data, without copying.
func readIndex(data []byte) (map[string][]byte, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("zones: embedded zoneinfo.zip: %w", err)
	}
	idx := make(map[string][]byte, len(zr.File))
	for _, f := range zr.File {
		if f.Method != zip.Store || f.FileInfo().IsDir() {
			continue
		}
		off, err := f.DataOffset()
		if err != nil || off < 0 || off+int64(f.UncompressedSize64) > int64(len(data)) {
			return nil, fmt.Errorf("zones: embedded zoneinfo.zip: bad entry %q", f.Name)
		}
		idx[f.Name] = data[off : off+int64(f.UncompressedSize64)]
	}
	return idx, nil
}
