package queue

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestPubAck: the acknowledgement forms JetStream sends (as nats-server
// v2.15 writes them) are read right, the common one without decoding.
func TestPubAck(t *testing.T) {
	status := nats.Header{}
	status.Set("Status", "503")
	for _, c := range []struct {
		name    string
		m       *nats.Msg
		dup     bool
		wantErr string
	}{
		{"stored", &nats.Msg{Data: []byte(`{"stream":"` + StreamName + `","seq":42}`)}, false, ""},
		{"stored with domain", &nats.Msg{Data: []byte(`{"stream":"` + StreamName + `","domain":"hub","seq":42}`)}, false, ""},
		{"duplicate", &nats.Msg{Data: []byte(`{"stream":"` + StreamName + `","seq":42,"duplicate": true}`)}, true, ""},
		{"refused", &nats.Msg{Data: []byte(`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"` + StreamName + `","seq":0}`)}, false, "maximum messages exceeded"},
		{"other stream", &nats.Msg{Data: []byte(`{"stream":"OTHER","seq":1}`)}, false, `stream "OTHER"`},
		{"no responders", &nats.Msg{Header: status}, false, "status 503"},
		{"garbage", &nats.Msg{Data: []byte(`{"stream":`)}, false, "publish acknowledgement"},
	} {
		dup, err := pubAck(c.m)
		if dup != c.dup || (err == nil) != (c.wantErr == "") || err != nil && !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: duplicate %v, err %v; want %v, %q", c.name, dup, err, c.dup, c.wantErr)
		}
	}
}
