package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeClusterSafetyFlags: the flags of the servers' check apply to
// cluster mode only, are validated, and cluster mode without a way to
// check the servers is refused, naming the flags that give one and the
// override.
func TestServeClusterSafetyFlags(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "secrets.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cluster := []string{"--nats-url", "nats://127.0.0.1:1", "--secrets-key-file", key}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--allow-lazy-nats-sync"}, []string{"give --nats-url"}},
		{[]string{"--nats-monitor-urls", "http://127.0.0.1:8222"}, []string{"give --nats-url"}},
		{[]string{"--allow-fewer-replicas"}, []string{"give --nats-url"}},
		{[]string{"--replicas", "-1"}, []string{"--replicas -1"}},
		{append([]string{"--nats-monitor-urls", "ftp://n1:8222"}, cluster...), []string{`--nats-monitor-urls: "ftp://n1:8222"`}},
		{append([]string{"--nats-system-creds", key, "--nats-system-nkey", key}, cluster...), []string{"not both"}},
		{cluster, []string{"--nats-monitor-urls", "--nats-system-creds", "--allow-lazy-nats-sync"}},
		{append([]string{"--allow-lazy-nats-sync"}, cluster...), []string{"give --replicas"}},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"serve", "--data-dir", filepath.Join(dir, "d"), "--nats-listen", ""}, tc.args...)
		code := Main(context.Background(), args, &out, &errb)
		for _, w := range tc.want {
			if code == 0 || !strings.Contains(errb.String(), w) {
				t.Errorf("%v: exit %d, want an error with %q:\n%s", tc.args, code, w, errb.String())
			}
		}
	}
}

func TestWithoutUsers(t *testing.T) {
	got := withoutUsers("nats://bookline:pw@n1:4222, nats://n2:4222,tls://u@n3:4222")
	if want := "nats://n1:4222,nats://n2:4222,tls://n3:4222"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
