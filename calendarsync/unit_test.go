package calendarsync

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/api/googleapi"

	"github.com/bookline/bookline/actor"
)

// gerr is a Google error as the Google provider hands it to the Syncer.
func gerr(code int, reason string) error {
	return googleError(&googleapi.Error{Code: code, Errors: []googleapi.ErrorItem{{Reason: reason}}})
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err    error
		act    action
		reason string
	}{
		{gerr(429, "rateLimitExceeded"), actRetry, ReasonRateLimited},
		{gerr(403, "rateLimitExceeded"), actRetry, ReasonRateLimited},
		{gerr(403, "userRateLimitExceeded"), actRetry, ReasonRateLimited},
		{gerr(403, "quotaExceeded"), actThrottle, ReasonQuotaExceeded},
		{gerr(403, "dailyLimitExceeded"), actThrottle, ReasonQuotaExceeded},
		{gerr(429, "quotaExceeded"), actThrottle, ReasonQuotaExceeded},
		{gerr(403, "forbidden"), actDegrade, ReasonForbidden},
		{gerr(403, "insufficientPermissions"), actDegrade, ReasonForbidden},
		{gerr(401, "authError"), actDegrade, ReasonUnauthorized},
		{gerr(404, "notFound"), actNotFound, ReasonCalendarNotFound},
		{gerr(409, "duplicate"), actConflict, ReasonOther},
		{gerr(410, "deleted"), actGone, ReasonOther},
		{gerr(412, "conditionNotMet"), actPrecondition, ReasonPrecondition},
		{gerr(500, "backendError"), actRetry, ReasonServerError},
		{gerr(503, ""), actRetry, ReasonServerError},
		{gerr(400, "invalid"), actDrop, ReasonBadRequest},
		{fmt.Errorf("wrapped: %w", &oauth2.RetrieveError{ErrorCode: "invalid_grant", Response: &http.Response{StatusCode: 400}}), actDegrade, ReasonInvalidGrant},
		{&oauth2.RetrieveError{Response: &http.Response{StatusCode: 503}}, actRetry, ReasonServerError},
		{context.DeadlineExceeded, actRetry, ReasonTimeout},
		{fmt.Errorf("%w: no file", ErrCredentials), actDegrade, ReasonCredentials},
		{errors.New("connection reset"), actRetry, ReasonNetwork},
	} {
		act, reason := classify(c.err)
		if act != c.act || reason != c.reason {
			t.Errorf("classify(%v) = %v %q, want %v %q", c.err, act, reason, c.act, c.reason)
		}
	}
}

func TestBackoffIsCappedWithJitter(t *testing.T) {
	for attempt := range 40 {
		d := backoff(attempt, 100*time.Millisecond, 5*time.Second)
		want := min(100*time.Millisecond<<min(attempt, 20), 5*time.Second)
		if d < want/2 || d > want {
			t.Fatalf("attempt %d: %s outside [%s, %s]", attempt, d, want/2, want)
		}
	}
}

func TestBlockIDAndEventID(t *testing.T) {
	id := BlockID("team@example.com", "abc123")
	if id != BlockID("team@example.com", "abc123") || id == BlockID("other@example.com", "abc123") {
		t.Fatal("block ids must be deterministic and per calendar")
	}
	if !actor.ValidBlockID(id) {
		t.Fatalf("block id %q invalid", id)
	}
	ev := EventFor(&fakeBooking, nil)
	if !regexp.MustCompile(`^[0-9a-v]{5,}$`).MatchString(ev.Id) || len(ev.Id) > 1024 {
		t.Fatalf("event id %q is not base32hex 5-1024", ev.Id)
	}
}

func TestTokenSourceKinds(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	pk := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: must(x509.MarshalPKCS8PrivateKey(key))})
	sa, _ := json.Marshal(map[string]string{"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com",
		"private_key": string(pk), "private_key_id": "k1", "token_uri": "https://oauth2.googleapis.com/token"})
	for name, c := range map[string]struct {
		json string
		ok   bool
	}{
		"service account":                   {string(sa), true},
		"authorized user":                   {`{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r"}`, true},
		"client file":                       {`{"installed":{"client_id":"c","client_secret":"s","auth_uri":"https://accounts.google.com/o/oauth2/auth","token_uri":"https://oauth2.googleapis.com/token","redirect_uris":["http://localhost"]},"refresh_token":"r"}`, true},
		"client file without refresh token": {`{"installed":{"client_id":"c","client_secret":"s"}}`, false},
		"unknown type":                      {`{"type":"external_account"}`, false},
		"not json":                          {`nope`, false},
	} {
		ts, err := TokenSource([]byte(c.json), "user@example.com")
		if (err == nil) != c.ok || (c.ok && ts == nil) {
			t.Errorf("%s: err %v", name, err)
		}
		if err != nil && !errors.Is(err, ErrCredentials) {
			t.Errorf("%s: error %v does not wrap ErrCredentials", name, err)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

var fakeBooking = bookingForTest()

// TestTokenRefreshIsBounded: a token endpoint that never answers fails the
// refresh instead of hanging every calendar.
func TestTokenRefreshIsBounded(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	ts, err := tokenSource([]byte(`{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r","token_uri":"`+srv.URL+`"}`), "", 100*time.Millisecond, Scopes)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ts.Token(); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a hung refresh returned a token")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the refresh is not bounded")
	}
}

func TestEtagCacheIsBoundedLRU(t *testing.T) {
	c := newEtagCache(2)
	a, b, d := eventKey{"g", "a"}, eventKey{"g", "b"}, eventKey{"g", "d"}
	c.put(a, `"1"`)
	c.put(b, `"2"`)
	if _, ok := c.get(a); !ok { // a is now the most recently used
		t.Fatal("a missing")
	}
	c.put(d, `"3"`)
	if _, ok := c.get(b); ok || c.len() != 2 {
		t.Fatalf("the least recently used entry must go first (len %d)", c.len())
	}
	if e, _ := c.get(a); e != `"1"` {
		t.Fatalf("a = %q", e)
	}
	c.put(a, `"4"`)
	if e, _ := c.get(a); e != `"4"` || c.len() != 2 {
		t.Fatalf("a = %q, len %d", e, c.len())
	}
	if _, ok := c.get(eventKey{"other", "a"}); ok {
		t.Fatal("etags are per Google calendar")
	}
	c.put(a, "") // an answer without an etag
	c.forget(d)
	if _, ok := c.get(a); ok || c.len() != 0 {
		t.Fatalf("len %d after forgetting everything", c.len())
	}
}
