package calendarsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/calendar/v3"
	"google.golang.org/api/option"
)

// Scopes bookline asks for: calendar.events lets it write the mirrored
// events, read the events it turns into busy time and watch them for
// changes (events.watch). freebusy.query needs more: FreeBusyScopes.
var Scopes = []string{calendar.CalendarEventsScope}

// FreeBusyScopes are Scopes and calendar.events.freebusy, for links with
// check_freebusy (freebusy.query). A service account's domain-wide
// delegation must grant every scope asked for, so it is asked for only
// when configured (bookline serve --google-freebusy).
var FreeBusyScopes = []string{calendar.CalendarEventsScope, calendar.CalendarEventsFreebusyScope}

// ServiceFunc returns a Google Calendar client. The Syncer calls it again
// after an authorization failure, so an implementation that reads its
// credentials from a file picks up fixed credentials.
type ServiceFunc func(ctx context.Context) (*calendar.Service, error)

// ErrCredentials wraps failures to load or parse credentials.
var ErrCredentials = errors.New("calendarsync: credentials")

// CredentialsFile returns a ServiceFunc that reads path on every call. The
// file is either a service-account key (JSON with "type":
// "service_account"; subject, when set, is the user to impersonate through
// domain-wide delegation) or OAuth2 client credentials with a refresh
// token: {"type": "authorized_user", "client_id", "client_secret",
// "refresh_token"} (as written by gcloud), or a downloaded client secret
// file ({"installed": {...}} or {"web": {...}}) with a top-level
// "refresh_token" added. opts are added to the client's options (tests
// point it at a fake).
func CredentialsFile(path, subject string, opts ...option.ClientOption) ServiceFunc {
	return CredentialsFileScopes(path, subject, Scopes, opts...)
}

// CredentialsFileScopes is CredentialsFile asking for scopes.
func CredentialsFileScopes(path, subject string, scopes []string, opts ...option.ClientOption) ServiceFunc {
	return func(ctx context.Context) (*calendar.Service, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCredentials, err)
		}
		ts, err := tokenSource(b, subject, RefreshTimeout, scopes)
		if err != nil {
			return nil, err
		}
		hc := oauth2.NewClient(context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Timeout: time.Minute}), ts)
		return calendar.NewService(ctx, append([]option.ClientOption{option.WithHTTPClient(hc)}, opts...)...)
	}
}

// RefreshTimeout bounds one token refresh (the token endpoint's answer):
// the Syncer's calls share one token source, so a refresh that hangs
// would stall every calendar.
const RefreshTimeout = 30 * time.Second

// TokenSource builds the OAuth2 token source of a credentials file (see
// CredentialsFile); each refresh is bounded by RefreshTimeout.
func TokenSource(b []byte, subject string) (oauth2.TokenSource, error) {
	return tokenSource(b, subject, RefreshTimeout, Scopes)
}

func tokenSource(b []byte, subject string, timeout time.Duration, scopes []string) (oauth2.TokenSource, error) {
	var head struct {
		Type         string          `json:"type"`
		ClientID     string          `json:"client_id"`
		ClientSecret string          `json:"client_secret"`
		RefreshToken string          `json:"refresh_token"`
		TokenURI     string          `json:"token_uri"`
		Installed    json.RawMessage `json:"installed"`
		Web          json.RawMessage `json:"web"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrCredentials, err)
	}
	// The token source keeps this context for every refresh; its HTTP
	// client's timeout is what bounds them.
	bg := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Timeout: timeout})
	switch {
	case head.Type == "service_account":
		cfg, err := google.JWTConfigFromJSON(b, scopes...)
		if err != nil {
			return nil, fmt.Errorf("%w: service account: %v", ErrCredentials, err)
		}
		cfg.Subject = subject
		return cfg.TokenSource(bg), nil
	case head.Type == "authorized_user":
		if head.ClientID == "" || head.ClientSecret == "" || head.RefreshToken == "" {
			return nil, fmt.Errorf("%w: authorized_user needs client_id, client_secret and refresh_token", ErrCredentials)
		}
		ep := google.Endpoint
		if head.TokenURI != "" {
			ep.TokenURL = head.TokenURI
		}
		cfg := &oauth2.Config{ClientID: head.ClientID, ClientSecret: head.ClientSecret, Endpoint: ep, Scopes: scopes}
		return cfg.TokenSource(bg, &oauth2.Token{RefreshToken: head.RefreshToken}), nil
	case head.Installed != nil || head.Web != nil:
		if head.RefreshToken == "" {
			return nil, fmt.Errorf("%w: an OAuth client file needs a top-level refresh_token", ErrCredentials)
		}
		cfg, err := google.ConfigFromJSON(b, scopes...)
		if err != nil {
			return nil, fmt.Errorf("%w: oauth client: %v", ErrCredentials, err)
		}
		return cfg.TokenSource(bg, &oauth2.Token{RefreshToken: head.RefreshToken}), nil
	}
	return nil, fmt.Errorf("%w: unknown credentials type %q (want service_account, authorized_user or an OAuth client file)", ErrCredentials, head.Type)
}
