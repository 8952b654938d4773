package queue

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestParsePubAck: the acknowledgements JetStream sends, read by the fast
// path or decoded, and its refusals as errors.
func TestParsePubAck(t *testing.T) {
	for _, c := range []struct {
		in   string
		want jetstream.PubAck
	}{
		{`{"stream":"BOOKLINE_CMD","seq":42}`, jetstream.PubAck{Stream: StreamName, Sequence: 42}},
		{`{"stream":"BOOKLINE_CMD","seq":7,"duplicate": true}`, jetstream.PubAck{Stream: StreamName, Sequence: 7, Duplicate: true}},
		{`{"stream":"BOOKLINE_CMD","domain":"hub","seq":9}`, jetstream.PubAck{Stream: StreamName, Domain: "hub", Sequence: 9}},
		{`{"stream":"BOOKLINE_CMD", "seq":3}`, jetstream.PubAck{Stream: StreamName, Sequence: 3}},
	} {
		got, err := parsePubAck([]byte(c.in))
		if err != nil || *got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	var apiErr *jetstream.APIError
	if _, err := parsePubAck([]byte(`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"BOOKLINE_CMD","seq":0}`)); !errors.As(err, &apiErr) || apiErr.ErrorCode != 10077 {
		t.Errorf("a refusal: %v, want its API error", err)
	}
	for _, bad := range []string{`{"stream":"OTHER","seq":1}`, `not json`, ``} {
		if ack, err := parsePubAck([]byte(bad)); err == nil {
			t.Errorf("%q: %+v, want an error", bad, ack)
		}
	}
}

// TestParsePubAckMatchesJSON: whatever the member order and spacing, the
// PubAck read is encoding/json's, and the stream's name is checked.
func TestParsePubAckMatchesJSON(t *testing.T) {
	for _, in := range []string{
		`{"stream":"BOOKLINE_CMD","seq":1,"duplicate":true}`,
		`{ "seq" : 2 , "stream" : "BOOKLINE_CMD" , "duplicate" : false }`,
		`{"duplicate":true,"domain":"d","seq":3,"stream":"BOOKLINE_CMD"}`,
		`{"stream":"BOOKLINE_CMD","seq":18446744073709551615}`,
		`{"stream":"BOOKLINE_CMD","seq":4,"val":"x"}`,
		`{"stream":"BOOKLINE_CMD","seq":-1}`,
		`{"stream":"BOOKLINE_CMD","seq":5,"duplicate":1}`,
		`{"stream":"BOOKLINE_CMD","seq":6}x`,
	} {
		var want jetstream.PubAck
		wantErr := json.Unmarshal([]byte(in), &want)
		got, err := parsePubAck([]byte(in))
		if (err != nil) != (wantErr != nil) || err == nil && *got != want {
			t.Errorf("%s: %+v, %v; want %+v, %v", in, got, err, want, wantErr)
		}
	}
}
