package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestReadyzSaysWhetherAnswersSurviveAPowerCut: /readyz stays 200 but its
// nats_durability check says whether answered commands survive a power
// cut, and bookline_nats_lazy_sync is 1 when they may not (here: the
// embedded server with --sync interval; a cluster's servers are covered
// in queue and cmd/bookline).
func TestReadyzSaysWhetherAnswersSurviveAPowerCut(t *testing.T) {
	for _, tc := range []struct {
		syncInterval bool
		detail       string
		lazy         float64
	}{
		{false, "ok: embedded NATS server", 0},
		{true, "LAZY (--sync interval)", 1},
	} {
		h := start(t, "", options{syncInterval: tc.syncInterval})
		r := h.do("GET", "/readyz", nil)
		var body struct {
			Checks map[string]string `json:"checks"`
		}
		if err := json.Unmarshal(r.Body, &body); r.Status != 200 || err != nil || !strings.HasPrefix(body.Checks["nats_durability"], tc.detail) {
			t.Errorf("sync interval %v: /readyz %d %s, want 200 with nats_durability %q…", tc.syncInterval, r.Status, r.Body, tc.detail)
		}
		got, ok := metricValue(string(h.do("GET", "/metrics", nil).Body), "bookline_nats_lazy_sync", nil)
		if !ok || got != tc.lazy {
			t.Errorf("sync interval %v: bookline_nats_lazy_sync %v (found %v), want %v", tc.syncInterval, got, ok, tc.lazy)
		}
	}
}
