package calendarsync_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/api/option"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/calendarsync/googletest"
	"github.com/bookline/bookline/data"
)

// tokenEndpoint is a fake OAuth2 token endpoint: it answers refresh-token
// grants with its current access token, or invalid_grant (a revoked
// refresh token) when that is "".
type tokenEndpoint struct {
	mu      sync.Mutex
	access  string
	refresh int
}

func (e *tokenEndpoint) set(tok string) { e.mu.Lock(); e.access = tok; e.mu.Unlock() }

func (e *tokenEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	e.mu.Lock()
	e.refresh++
	tok := e.access
	e.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.Form.Get("grant_type") != "refresh_token" || r.Form.Get("refresh_token") != "rt-1" || tok == "" {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant", "error_description": "Token has been expired or revoked."})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
}

// TestOAuthRefreshPath: the credentials file of an authorized user, through
// the real oauth2 refresh against a fake token endpoint: a working token
// mirrors; a revoked refresh token (invalid_grant) degrades the link with
// that reason, queued operations stay; a new grant resumes it.
func TestOAuthRefreshPath(t *testing.T) {
	fake := googletest.New(t)
	const g = "oauth@example.com"
	fake.AddCalendar(g)
	fake.RequireToken("at-1")
	te := &tokenEndpoint{access: "at-1"}
	ts := httptest.NewServer(te)
	defer ts.Close()
	path := filepath.Join(t.TempDir(), "creds.json")
	b, _ := json.Marshal(map[string]string{"type": "authorized_user", "client_id": "cid", "client_secret": "cs", "refresh_token": "rt-1", "token_uri": ts.URL})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, t.TempDir(), fastRetries(calendarsync.CredentialsFile(path, "", option.WithEndpoint(fake.Endpoint()))))
	defer stopNode(t, n)
	link(t, n, "oauth", g, false)
	s, e := slot(1)
	book(t, n, "oauth", s, e)
	waitDrained(t, n, "oauth")

	// The access token is revoked, and so is the refresh token.
	fake.RequireToken("at-2")
	te.set("")
	s, e = slot(3)
	if r := book(t, n, "oauth", s, e); r.Outcome != actor.OutcomeAccepted {
		t.Fatal(r)
	}
	waitStatus(t, n, "oauth", g, func(st data.LinkStatus) bool {
		return st.Status == calendarsync.StatusDegraded && strings.HasPrefix(st.Reason, calendarsync.ReasonInvalidGrant) && st.Pending == 1
	})
	te.set("at-2")
	n.google.Wake("oauth")
	waitStatus(t, n, "oauth", g, func(st data.LinkStatus) bool { return st.Status == calendarsync.StatusOK && st.Pending == 0 })
	compareMirror(t, n, fake, "oauth", g)
}
