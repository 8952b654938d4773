package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

const skipSummary = `Skips the command a partition is stopped at (POST
/v1/admin/partitions/{partition}/skip on a running bookline). A partition
stops at a command of a schema version this build does not know: the log
line PARTITION STOPPED AT A NEWER SCHEMA and /readyz name the partition and
the command's stream sequence. The skip is a command of the log itself: every
instance and every replay answers the skipped command command_skipped
instead of deciding it, and the partition goes on (docs/protocol.md,
"Versions"). The server refuses unless that partition is stopped at exactly
--seq. Upgrading to a build that knows the version decides the command
instead: prefer that when the command should take effect.`

func runSkip(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		url       string
		apiKey    string
		partition int
		seq       uint64
	)
	fs := newFlagSet("skip", stderr, skipSummary)
	fs.StringVar(&url, "url", "http://127.0.0.1:8080", "base URL of the running bookline")
	fs.StringVar(&apiKey, "api-key", "", "admin API key when the server has keys (prefer the environment variable to the flag)")
	fs.IntVar(&partition, "partition", -1, "the stopped partition (-1: the one stopped at --seq)")
	fs.Uint64Var(&seq, "seq", 0, "stream sequence of the command the partition is stopped at (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if seq == 0 {
		return errors.New("--seq is required: the stream sequence the partition is stopped at (see /readyz)")
	}
	if partition >= 0 {
		status, body, err := postSkip(ctx, url, apiKey, partition, seq)
		if err != nil {
			return err
		}
		return skipAnswer(stdout, partition, status, body)
	}
	// The command's partition is the one stopped at it: the server
	// refuses every other, so asking each in turn skips at most one.
	var last []byte
	for p := 0; ; p++ {
		status, body, err := postSkip(ctx, url, apiKey, p, seq)
		if err != nil {
			return err
		}
		switch {
		case status == http.StatusNotFound && p > 0:
			return fmt.Errorf("no partition is stopped at stream seq %d (partition %d: %s)", seq, p-1, bytes.TrimSpace(last))
		case status == http.StatusConflict && errorCode(body) == "not_stopped":
			last = body
			continue
		}
		return skipAnswer(stdout, p, status, body)
	}
}

// postSkip asks the server to skip the command at seq of partition p.
func postSkip(ctx context.Context, url, apiKey string, p int, seq uint64) (int, []byte, error) {
	body, _ := json.Marshal(map[string]uint64{"seq": seq})
	return adminCall(ctx, http.MethodPost, url, "/v1/admin/partitions/"+strconv.Itoa(p)+"/skip", apiKey, body, time.Minute, 1<<20)
}

func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

// skipAnswer prints the server's answer to a skip of partition p.
func skipAnswer(stdout io.Writer, p, status int, body []byte) error {
	switch status {
	case http.StatusOK:
		var r struct {
			Message string `json:"message"`
			Seq     uint64 `json:"seq"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("the server's answer %q: %w", body, err)
		}
		fmt.Fprintf(stdout, "partition %d: %s (partition.skip at stream seq %d)\n", p, r.Message, r.Seq)
		return nil
	case http.StatusAccepted:
		fmt.Fprintf(stdout, "partition %d: the skip is stored and not answered yet; /readyz says when the partition goes on\n", p)
		return nil
	}
	return fmt.Errorf("partition %d: %d %s", p, status, bytes.TrimSpace(body))
}
