package main

import (
	"flag"
	"io"
	"testing"
)

// TestEventBatchesFlag: --event-batches (BOOKLINE_EVENT_BATCHES) is off
// by default and reaches the node's configuration.
func TestEventBatchesFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want bool
	}{
		{nil, "", false},
		{[]string{"--event-batches"}, "", true},
		{nil, "true", true},
		{[]string{"--event-batches=false"}, "true", false},
	} {
		if c.env != "" {
			t.Setenv("BOOKLINE_EVENT_BATCHES", c.env)
		}
		var sc serveConfig
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		sc.defineFlags(fs)
		if err := parseFlagsWithConfig(fs, c.args, "config"); err != nil {
			t.Fatalf("%v with BOOKLINE_EVENT_BATCHES=%q: %v", c.args, c.env, err)
		}
		if got := sc.nodeConfig(nodeSetup{}).EventBatches; got != c.want {
			t.Errorf("%v with BOOKLINE_EVENT_BATCHES=%q: EventBatches %v, want %v", c.args, c.env, got, c.want)
		}
	}
}
