package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"time"
)

// adminCall sends one request to a running bookline's admin API (the skip,
// snapshot and verify commands): method on base URL + path, with the admin
// key when there is one and a JSON body when body is not nil. It returns
// the status and at most limit bytes of the answer; a larger answer is cut
// there, which the caller's decoding then reports. timeout bounds the
// whole call: a snapshot may take minutes, a skip seconds.
func adminCall(ctx context.Context, method, base, path, apiKey string, body []byte, timeout time.Duration, limit int64) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	return resp.StatusCode, b, err
}
