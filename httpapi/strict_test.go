package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// errorBody is an error answer with its details.
type errorBody struct {
	Error struct {
		Code    string             `json:"code"`
		Message string             `json:"message"`
		Details []actor.FieldError `json:"details"`
	} `json:"error"`
}

// TestBodiesAreStrictJSON: invalid UTF-8 anywhere in a body, an escaped
// lone surrogate, two keys for one field or -0 is 400 invalid_request on
// every write route, and nothing is stored; a blank customer is 400 too.
// (encoding/json would store U+FFFD, keep the last key, read 0.)
func TestBodiesAreStrictJSON(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("alice", "UTC")
	slot := func(i int) (string, string) {
		s := base.Add(time.Duration(i) * time.Hour)
		return s.Format(time.RFC3339), s.Add(time.Hour).Format(time.RFC3339)
	}
	booking := func(i int, customer, extra string) string {
		s, e := slot(i)
		return fmt.Sprintf(`{"start":%q,"end":%q,"customer":%s%s}`, s, e, customer, extra)
	}
	cases := []struct {
		name, method, path, body, field string
	}{
		{"invalid UTF-8 in customer", "POST", "/v1/calendars/alice/bookings", booking(0, "\"Jos\xe9\"", ""), "body"},
		{"invalid UTF-8 in metadata", "POST", "/v1/calendars/alice/bookings", booking(1, `"Ada"`, ",\"metadata\":{\"k\":\"\xff\"}"), "body"},
		{"invalid UTF-8 in a metadata key", "POST", "/v1/calendars/alice/bookings", booking(1, `"Ada"`, ",\"metadata\":{\"\xff\":1}"), "body"},
		{"invalid UTF-8 in an unknown field", "POST", "/v1/calendars/alice/bookings", booking(2, `"Ada"`, ",\"note\":\"\xc3\""), "body"},
		{"lone surrogate in customer", "POST", "/v1/calendars/alice/bookings", booking(3, `"A\udc00"`, ""), "body"},
		{"two customers", "POST", "/v1/calendars/alice/bookings", booking(4, `"Ada","customer":"Bob"`, ""), "body"},
		{"customer and Customer", "POST", "/v1/calendars/alice/bookings", booking(5, `"Ada","Customer":"Bob"`, ""), "body"},
		{"two metadata keys", "POST", "/v1/calendars/alice/bookings", booking(6, `"Ada"`, `,"metadata":{"a":1,"a":2}`), "body"},
		{"invalid UTF-8 in a hold", "POST", "/v1/calendars/alice/holds", booking(7, "\"Jos\xe9\"", ""), "body"},
		{"blank customer", "POST", "/v1/calendars/alice/bookings", booking(8, `"   "`, ""), "customer"},
		{"blank customer of a hold", "POST", "/v1/calendars/alice/holds", booking(8, `"\t\u00a0"`, ""), "customer"},
		{"invalid UTF-8 in a calendar name", "PUT", "/v1/calendars/alice", "{\"timezone\":\"UTC\",\"name\":\"Caf\xe9\"}", "body"},
		{"two timezones", "PUT", "/v1/calendars/alice", `{"timezone":"UTC","timezone":"Europe/Berlin"}`, "body"},
		{"-0 as capacity", "PUT", "/v1/calendars/alice", `{"timezone":"UTC","capacity":-0}`, "body"},
	}
	for _, c := range cases {
		r := h.do(c.method, c.path, c.body)
		var e errorBody
		if r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", c.name, r.Status, r.Body)
			continue
		}
		r.json(t, &e)
		if e.Error.Code != actor.CodeInvalidRequest || len(e.Error.Details) == 0 || e.Error.Details[0].Field != c.field {
			t.Errorf("%s: %s, want invalid_request on %s", c.name, r.Body, c.field)
		}
	}
	if got := h.listAll("alice"); len(got) != 0 {
		t.Errorf("bookings stored from refused bodies: %+v", got)
	}
	var cal data.Calendar
	h.do("GET", "/v1/calendars/alice", nil).json(t, &cal)
	if cal.Name != "alice" || cal.Timezone != "UTC" || cal.Rules.Capacity != 0 {
		t.Errorf("calendar changed by a refused body: %+v", cal)
	}
	// What the rules allow still passes: U+FFFD written as such, case-
	// distinct metadata keys, a customer with inner spaces.
	r := h.do("POST", "/v1/calendars/alice/bookings", booking(9, `"A\ufffd B"`, `,"metadata":{"a":1,"A":2}`))
	h.mustStatus(r, http.StatusCreated)
}

// TestOutOfRangeTimesSameMessage: a start and an end outside the years
// bookline takes are refused with the same words, also in year 0001
// (Go's zero time, which a missing time also is).
func TestOutOfRangeTimesSameMessage(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("alice", "UTC")
	for _, c := range []struct{ start, end string }{
		{"0001-01-01T00:00:00Z", "0001-01-01T01:00:00Z"},
		{"1900-01-01T00:00:00Z", "2300-01-01T00:00:00Z"},
	} {
		for _, path := range []string{"/v1/calendars/alice/bookings", "/v1/calendars/alice/holds"} {
			r := h.do("POST", path, map[string]string{"start": c.start, "end": c.end, "customer": "Ada"})
			var e errorBody
			r.json(t, &e)
			if r.Status != http.StatusBadRequest || len(e.Error.Details) != 2 || e.Error.Details[0].Field != "start" ||
				e.Error.Details[1].Field != "end" || e.Error.Details[0].Message != e.Error.Details[1].Message ||
				e.Error.Details[0].Message != actor.TimeRangeMessage {
				t.Errorf("%s %s..%s: %d %s", path, c.start, c.end, r.Status, r.Body)
			}
		}
	}
	r := h.do("POST", "/v1/calendars/alice/bookings", map[string]string{"customer": "Ada"})
	var e errorBody
	r.json(t, &e)
	if len(e.Error.Details) != 2 || !strings.HasPrefix(e.Error.Details[0].Message, "is required") {
		t.Errorf("missing times: %s", r.Body)
	}
}

// metricValue reads one sample of the Prometheus text at /metrics.
func (h *harness) metricValue(series string) string {
	h.t.Helper()
	r := h.do("GET", "/metrics", nil)
	for _, line := range strings.Split(string(r.Body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestAdminSkipsAStoppedPartition: a command of a schema version this
// build does not know stops its partition (readyz 503 naming it, the
// stalled metric 1). The admin route refuses a skip of any other command
// and to non-admin keys; a skip of that command is published and
// answered, the partition decides again (readyz 200, metric 0), the
// command's publisher got the refusal command_skipped, the skip is
// recorded, and a replay of the stream, by this build and by one that
// knows the skipped version, equals the live index.
func TestAdminSkipsAStoppedPartition(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) { c.Keys = testKeyring(t) }})
	admin := bearer(adminKey)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		return h.node.Store().View(func(tx *data.Tx) error {
			for p := range h.node.Parts() {
				if tx.RulesLevel(p) != 2 {
					return fmt.Errorf("partition %d below level 2", p)
				}
			}
			return nil
		})
	})
	h.mustStatus(h.do("PUT", "/v1/calendars/alice", map[string]string{"timezone": "UTC"}, admin...), http.StatusCreated)
	pa := queue.PartitionOf("alice", len(h.node.Parts()))
	inbox := nats.NewInbox()
	replies, err := h.node.Conn().SubscribeSync(inbox + ".*")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(body string, schema, reply string) uint64 {
		m := nats.NewMsg(queue.CommandSubject("alice"))
		m.Data = []byte(body)
		m.Header.Set(queue.HeaderSchema, schema)
		m.Header.Set(queue.HeaderReplyTo, inbox+"."+reply)
		ack, err := h.node.JetStream().PublishMsg(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	s, e := base.Format(time.RFC3339), base.Add(time.Hour).Format(time.RFC3339)
	newer := publish(fmt.Sprintf(`{"v":9,"type":"booking.create","request_id":"n3","calendar_id":"alice","booking":{"start":%q,"end":%q,"customer":"Ada"},"seats":2}`, s, e), "9", "newer")
	publish(fmt.Sprintf(`{"v":1,"type":"booking.create","request_id":"b1","calendar_id":"alice","booking":{"start":%q,"end":%q,"customer":"Bob"}}`, s, e), "1", "after")
	stalled := fmt.Sprintf(`bookline_partition_stalled{partition="%d"}`, pa)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		r := h.do("GET", "/readyz", nil)
		if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), fmt.Sprintf("partition %d stopped: stream seq %d", pa, newer)) {
			return fmt.Errorf("readyz %d %s", r.Status, r.Body)
		}
		if v := h.metricValue(stalled); v != "1" {
			return fmt.Errorf("%s = %q", stalled, v)
		}
		return nil
	})
	path := fmt.Sprintf("/v1/admin/partitions/%d/skip", pa)
	for _, c := range []struct {
		path    string
		body    any
		headers []string
		status  int
		code    string
	}{
		{path, map[string]uint64{"seq": newer}, bearer(bookerKey), 403, "forbidden"},
		{path, map[string]uint64{"seq": newer}, nil, 401, "unauthorized"},
		{path, map[string]uint64{"seq": newer + 1}, admin, 409, actor.CodeNotStopped},
		{path, map[string]uint64{"seq": newer - 1}, admin, 409, actor.CodeNotStopped},
		{fmt.Sprintf("/v1/admin/partitions/%d/skip", (pa+1)%len(h.node.Parts())), map[string]uint64{"seq": newer}, admin, 409, actor.CodeNotStopped},
		{"/v1/admin/partitions/99/skip", map[string]uint64{"seq": newer}, admin, 404, "not_found"},
		{"/v1/admin/partitions/x/skip", map[string]uint64{"seq": newer}, admin, 400, actor.CodeInvalidRequest},
		{path, map[string]string{"seq": "1"}, admin, 400, actor.CodeInvalidRequest},
		{path, map[string]any{}, admin, 400, actor.CodeInvalidRequest},
	} {
		r := h.do("POST", c.path, c.body, c.headers...)
		if r.Status != c.status || r.errorCode(t) != c.code {
			t.Errorf("POST %s %v: %d %s, want %d %s", c.path, c.body, r.Status, r.Body, c.status, c.code)
		}
	}
	r := h.do("POST", path, map[string]uint64{"seq": newer}, admin...)
	h.mustStatus(r, http.StatusOK)
	var skip actor.Reply
	r.json(t, &skip)
	if skip.Outcome != actor.OutcomeAccepted || skip.Type != actor.TypePartitionSkip || !strings.Contains(skip.Message, fmt.Sprintf("stream seq %d skipped", newer)) {
		t.Fatalf("skip answer %s", r.Body)
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if r := h.do("GET", "/readyz", nil); r.Status != http.StatusOK {
			return fmt.Errorf("readyz %d %s", r.Status, r.Body)
		}
		if v := h.metricValue(stalled); v != "0" {
			return fmt.Errorf("%s = %q", stalled, v)
		}
		return nil
	})
	got := map[string]actor.Reply{}
	for len(got) < 2 {
		m, err := replies.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("replies %v: %v", got, err)
		}
		var rep actor.Reply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatal(err)
		}
		got[strings.TrimPrefix(m.Subject, inbox+".")] = rep
	}
	if got["newer"].Code != actor.CodeCommandSkipped || got["after"].Outcome != actor.OutcomeAccepted {
		t.Fatalf("replies %+v", got)
	}
	// The skip is recorded under its partition's system token.
	rec := h.do("GET", fmt.Sprintf("/v1/calendars/%s/requests/skip.%d", queue.SystemToken(pa, len(h.node.Parts())), newer), nil, admin...)
	if rec.Status != http.StatusOK || !strings.Contains(string(rec.Body), `"outcome":"accepted"`) {
		t.Errorf("the skip's record: %d %s", rec.Status, rec.Body)
	}
	if r := h.do("POST", path, map[string]uint64{"seq": newer}, admin...); r.Status != http.StatusConflict {
		t.Errorf("a second skip: %d %s", r.Status, r.Body)
	}

	var live data.Digest
	if err := h.node.Store().View(func(tx *data.Tx) (err error) { live, err = tx.Digest(); return err }); err != nil {
		t.Fatal(err)
	}
	replay := func() string {
		store := datatest.MustOpen(t)
		if _, err := queue.Replay(context.Background(), h.node.JetStream(), store, queue.ReplayOptions{}); err != nil {
			t.Fatal(err)
		}
		var d data.Digest
		_ = store.View(func(tx *data.Tx) (err error) { d, err = tx.Digest(); return err })
		return d.Total
	}
	if got := replay(); got != live.Total {
		t.Fatal("replay differs from the live index")
	}
	restore := actor.SetKnownSchemaVersionForTest(9)
	defer restore()
	if got := replay(); got != live.Total {
		t.Fatal("a replay by a build that knows version 9 differs from the live index")
	}
}
