package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/bookline/bookline/data"
)

const snapshotSummary = `Takes an index snapshot on a running bookline now (POST
/v1/admin/snapshots): the index is copied in one read transaction while the
writers go on, stored in the NATS object store BOOKLINE_SNAPSHOTS, older
snapshots past --snapshot-keep are deleted and a bounded stream is trimmed.
With --list it prints the stored snapshots instead.`

func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		url    string
		apiKey string
		list   bool
		asJSON bool
	)
	fs := newFlagSet("snapshot", stderr, snapshotSummary)
	fs.StringVar(&url, "url", "http://127.0.0.1:8080", "base URL of the running bookline")
	fs.StringVar(&apiKey, "api-key", "", "admin API key when the server has keys (prefer the environment variable to the flag)")
	fs.BoolVar(&list, "list", false, "list the stored snapshots instead of taking one")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	method := http.MethodPost
	if list {
		method = http.MethodGet
	}
	status, body, err := adminCall(ctx, method, url, "/v1/admin/snapshots", apiKey, nil, 15*time.Minute, 16<<20)
	if err != nil {
		return err
	}
	if status/100 != 2 {
		return fmt.Errorf("%s %s/v1/admin/snapshots: %d %s", method, strings.TrimRight(url, "/"), status, body)
	}
	if asJSON {
		_, err := stdout.Write(append(body, '\n'))
		return err
	}
	var snaps []data.SnapshotInfo
	if list {
		var l struct {
			Snapshots []data.SnapshotInfo `json:"snapshots"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			return err
		}
		snaps = l.Snapshots
		if len(snaps) == 0 {
			fmt.Fprintln(stdout, "no snapshots")
			return nil
		}
	} else {
		var si data.SnapshotInfo
		if err := json.Unmarshal(body, &si); err != nil {
			return err
		}
		if si.Name == "" {
			return errors.New("the server answered no snapshot name")
		}
		snaps = []data.SnapshotInfo{si}
	}
	for _, si := range snaps {
		fmt.Fprintf(stdout, "%s  taken %s  stream seq %d  %d bytes  digest %s\n",
			si.Name, si.TakenAt.Format(time.RFC3339), si.StreamLast, si.Size, si.Digest)
	}
	return nil
}
