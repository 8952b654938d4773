package data

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Options tune Open.
type Options struct {
	// NoSync skips the fsync of every commit. A commit is then durable
	// against the death of the process (kill -9: the kernel's page cache
	// holds every write), not against an OS crash or a power loss, after
	// which the file may be torn. bookline uses it when the command stream
	// is not fsynced per message either (--sync interval): fsyncing an index
	// derived from an unsynced log buys nothing, because after a power loss
	// the log's tail is gone anyway and the index must follow the log.
	//
	// To make that safe, Open keeps a small session file next to the index
	// (fsynced, see below). When it finds that an earlier NoSync session
	// never closed cleanly and the machine has rebooted since (another
	// kernel boot id), the index is not trusted: it is moved aside
	// (<path>.discarded) and Open starts a new, empty one, which the caller
	// rebuilds from the log (Store.Discarded says so).
	NoSync bool
}

// The session file records whether commits may be in flight without fsync.
// Its states:
//
//	bookline-index-session 1 open <boot id>   a NoSync session is running (or died)
//	bookline-index-session 1 clean            every commit is on disk
//
// It is written (write, fsync, rename, fsync directory) before the first
// NoSync commit and after the final fsync of Close.
const sessionMagic = "bookline-index-session 1"

// bootID identifies the running kernel boot; "" when unknown (then any
// unclean NoSync session counts as a possible power loss). A variable so that
// tests can simulate a reboot.
var bootID = func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

func sessionPath(index string) string { return index + ".session" }

func sessionExists(index string) bool {
	_, err := os.Stat(sessionPath(index))
	return err == nil
}

// uncleanReboot reports why the index at path cannot be trusted ("" when it
// can): an earlier NoSync session did not close and the machine rebooted.
func uncleanReboot(path string) (string, error) {
	b, err := os.ReadFile(sessionPath(path))
	if os.IsNotExist(err) {
		return "", nil // no NoSync session ever ran here: every commit was fsynced
	} else if err != nil {
		return "", fmt.Errorf("data: read index session: %w", err)
	}
	state, ok := strings.CutPrefix(strings.TrimSpace(string(b)), sessionMagic+" ")
	if !ok {
		return "unreadable index session file", nil
	}
	boot, open := strings.CutPrefix(state, "open ")
	switch {
	case state == "clean":
		return "", nil
	case !open:
		return fmt.Sprintf("unknown index session state %q", state), nil
	case boot != "" && boot == bootID():
		// The process died (kill -9, OOM, panic) but the kernel did
		// not: every write it made is in the page cache.
		return "", nil
	default:
		return fmt.Sprintf("the index was written without fsync by a session that did not close, and the machine restarted since (boot %s, now %s): it may be torn", boot, bootID()), nil
	}
}

// writeSession replaces the session file durably.
func writeSession(path, state string) error {
	tmp := sessionPath(path) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("data: index session: %w", err)
	}
	_, err = f.WriteString(sessionMagic + " " + state + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, sessionPath(path))
	}
	if err == nil {
		err = SyncDir(filepath.Dir(path))
	}
	if err != nil {
		return fmt.Errorf("data: index session: %w", err)
	}
	return nil
}

// SyncDir fsyncs a directory, which makes a rename or a new file in it
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// MkdirAllDurable is os.MkdirAll whose new directories survive a power
// loss: the parent of every directory it creates is fsynced (POSIX makes a
// new directory entry durable only then).
func MkdirAllDurable(dir string) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := MkdirAllDurable(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	return SyncDir(filepath.Dir(dir))
}

// discard moves an untrusted index file aside, replacing an earlier one.
func discard(path string) error {
	if err := os.Rename(path, path+".discarded"); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("data: move untrusted index aside: %w", err)
	}
	return SyncDir(filepath.Dir(path))
}
