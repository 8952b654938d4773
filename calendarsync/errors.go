package calendarsync

import (
	"context"
	"errors"
	"net"
	"net/http"

	"golang.org/x/oauth2"
	"google.golang.org/api/googleapi"
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

func googleReason(e *googleapi.Error) string {
	for _, it := range e.Errors {
		if it.Reason != "" {
			return it.Reason
		}
	}
	return ""
}

// classify decides what a failed call means.
func classify(err error) (action, string) {
	var ge *googleapi.Error
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
	case errors.As(err, &ge):
		reason := googleReason(ge)
		switch {
		case ge.Code == http.StatusUnauthorized:
			return actDegrade, ReasonUnauthorized
		case reason == "quotaExceeded" || reason == "dailyLimitExceeded":
			return actThrottle, ReasonQuotaExceeded
		case ge.Code == http.StatusTooManyRequests:
			return actRetry, ReasonRateLimited
		case ge.Code == http.StatusForbidden && (reason == "rateLimitExceeded" || reason == "userRateLimitExceeded"):
			return actRetry, ReasonRateLimited
		case ge.Code == http.StatusForbidden:
			return actDegrade, ReasonForbidden
		case ge.Code == http.StatusNotFound:
			return actNotFound, ReasonCalendarNotFound
		case ge.Code == http.StatusConflict:
			return actConflict, ReasonOther
		case ge.Code == http.StatusGone:
			return actGone, ReasonOther
		case ge.Code == http.StatusPreconditionFailed:
			return actPrecondition, ReasonPrecondition
		case ge.Code >= 500:
			return actRetry, ReasonServerError
		case ge.Code == http.StatusBadRequest:
			return actDrop, ReasonBadRequest
		}
		return actRetry, ReasonOther
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return actRetry, ReasonTimeout
	}
	return actRetry, ReasonNetwork
}
