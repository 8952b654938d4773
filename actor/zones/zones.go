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
