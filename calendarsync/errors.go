package calendarsync

import (
	"context"
	"errors"
	"net"
	"net/http"

	"golang.org/x/oauth2"
)

// What to do after a failed call.
type action int

const (
	actRetry    action = iota // transient: back off and retry
	actDegrade                // the link cannot work until someone fixes it: pause
	actDrop                   // this operation can never succeed: log and skip it
	actNotFound               // 404 (meaning depends on the call)
	actConflict               // 409 duplicate
	actGone                   // 410
	actThrottle               // usage quota spent: every call waits long
	// actPrecondition: 412, the event changed since its etag was read
	// (a late write of ours, another instance, a hand edit): read it
	// again and re-apply; never a dead letter, never the link's fault.
	actPrecondition
)

// Failure reasons (metric labels; stable).
const (
	ReasonRateLimited      = "rate_limited"
	ReasonQuotaExceeded    = "quota_exceeded"
	ReasonServerError      = "server_error"
	ReasonTimeout          = "timeout"
	ReasonNetwork          = "network"
	ReasonUnauthorized     = "unauthorized"
	ReasonInvalidGrant     = "invalid_grant"
	ReasonForbidden        = "forbidden"
	ReasonCalendarNotFound = "calendar_not_found"
	ReasonCredentials      = "credentials"
	ReasonNoCredentials    = "no_credentials"
	ReasonBadRequest       = "bad_request"
	ReasonPrecondition     = "precondition_failed"
	ReasonOther            = "other"
)

// classify decides what a failed call means: the provider's answer
// (*CallError, with Google's reasons for rate and usage limits), a failed
// OAuth2 token refresh, a timeout, else a network failure.
func classify(err error) (action, string) {
	var re *oauth2.RetrieveError
	var ne net.Error
	switch {
	case errors.Is(err, ErrCredentials):
		return actDegrade, ReasonCredentials
	case errors.As(err, &re):
		if re.Response != nil && re.Response.StatusCode >= 500 {
			return actRetry, ReasonServerError
		}
		if re.ErrorCode == "invalid_grant" {
			return actDegrade, ReasonInvalidGrant
		}
		return actDegrade, ReasonUnauthorized
	case isCallError(err):
		ge, _ := callError(err)
		reason := ge.Reason
		switch {
		case ge.Status == http.StatusUnauthorized:
			return actDegrade, ReasonUnauthorized
		case reason == "quotaExceeded" || reason == "dailyLimitExceeded":
			return actThrottle, ReasonQuotaExceeded
		case ge.Status == http.StatusTooManyRequests:
			return actRetry, ReasonRateLimited
		case ge.Status == http.StatusForbidden && (reason == "rateLimitExceeded" || reason == "userRateLimitExceeded"):
			return actRetry, ReasonRateLimited
		case ge.Status == http.StatusForbidden:
			return actDegrade, ReasonForbidden
		case ge.Status == http.StatusNotFound:
			return actNotFound, ReasonCalendarNotFound
		case ge.Status == http.StatusConflict:
			return actConflict, ReasonOther
		case ge.Status == http.StatusGone:
			return actGone, ReasonOther
		case ge.Status == http.StatusPreconditionFailed:
			return actPrecondition, ReasonPrecondition
		case ge.Status >= 500:
			return actRetry, ReasonServerError
		case ge.Status == http.StatusBadRequest:
			return actDrop, ReasonBadRequest
		}
		return actRetry, ReasonOther
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return actRetry, ReasonTimeout
	}
	return actRetry, ReasonNetwork
}
