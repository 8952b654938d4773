package secretkey_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bookline/bookline/data/secretkey"
)

func TestSealOpen(t *testing.T) {
	k, err := secretkey.LoadOrCreate(filepath.Join(t.TempDir(), secretkey.FileName))
	if err != nil {
		t.Fatal(err)
	}
	v, err := k.Seal([]byte("whsec_abc"), "webhook:1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(v, "whsec") || !secretkey.IsSealed(v) || secretkey.SealedKeyID(v) != k.ID() {
		t.Fatalf("sealed value %q", v)
	}
	if got, err := k.Open(v, "webhook:1"); err != nil || string(got) != "whsec_abc" {
		t.Fatalf("open: %q %v", got, err)
	}
	v2, _ := k.Seal([]byte("whsec_abc"), "webhook:1")
	if v2 == v {
		t.Error("two seals of the same value are equal (no fresh nonce)")
	}
	// Bound to its place: copied into another record it does not open.
	if _, err := k.Open(v, "webhook:2"); !errors.Is(err, secretkey.ErrCorrupt) {
		t.Errorf("open elsewhere: %v", err)
	}
	// Altered: does not open.
	b := []byte(v)
	b[len(b)-3] ^= 1
	if _, err := k.Open(string(b), "webhook:1"); !errors.Is(err, secretkey.ErrCorrupt) {
		t.Errorf("open altered: %v", err)
	}
	other, _ := secretkey.LoadOrCreate(filepath.Join(t.TempDir(), secretkey.FileName))
	if _, err := other.Open(v, "webhook:1"); !errors.Is(err, secretkey.ErrWrongKey) {
		t.Errorf("open with another key: %v", err)
	}
	if _, err := k.Open("whsec_abc", "webhook:1"); !errors.Is(err, secretkey.ErrNotSealed) {
		t.Errorf("open clear text: %v", err)
	}
	if bytes.Equal(k.MAC("hold", "a", "bc"), k.MAC("hold", "ab", "c")) || bytes.Equal(k.MAC("hold", "a"), other.MAC("hold", "a")) {
		t.Error("MACs collide across parts or keys")
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, secretkey.FileName)
	// Processes starting together make one key.
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := secretkey.LoadOrCreate(path)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = k.ID()
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent starts made different keys: %v", ids)
		}
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", st, err)
	}
	k, err := secretkey.Load(path)
	if err != nil || k.ID() != ids[0] {
		t.Fatalf("reload: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := secretkey.Load(path); !errors.Is(err, secretkey.ErrMode) {
		t.Fatalf("world-readable key: %v", err)
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := secretkey.Load(bad); err == nil {
		t.Fatal("a short key loaded")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
