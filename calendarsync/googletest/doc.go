// Package googletest is a fake Google Calendar API v3 server for tests: the
// real REST paths under /calendar/v3/, so the real client
// (google.golang.org/api/calendar/v3) talks to it through
// option.WithEndpoint. It keeps events per calendar (deleted events keep
// their id, with status cancelled), supports insert, get, patch, update,
// delete (honouring If-Match with 412 conditionNotMet; every change makes
// a new etag), list with sync and page tokens, and freeBusy, and can
// inject faults: any status with a Google error reason, errors after the
// change was made (a lost response), slow responses (dropped once the
// client gives up), requests applied late, after their client gave up
// (Fault.Late), and 401 for everything.
package googletest
