// Package ui holds bookline's embeddable booking UI, served from the binary
// by httpapi: the web component <bookline-booking> (bookline.js, plain
// hand-written JavaScript, no build step and no third-party code) and the
// template of the /book/... pages that use it (a calendar's, a pool's, and
// that of calendars booked together).
//
// Caveats: the component uses only what evergreen browsers have (custom
// elements, fetch, Intl time zones, crypto.randomUUID in secure contexts
// and on localhost, with a fallback elsewhere). It renders into the light
// DOM with "bl-" class names, so a host page can restyle it; its styles are
// scoped under the element's tag name. Times come from the API as UTC and
// are shown in the visitor's time zone through Intl, never by adding
// offsets by hand, so DST days list the right starts; the month view's
// days are that zone's days too. The month view reads availability a
// month per query (docs/api.md, "Booking pages and publishable keys"), so
// the cost of a month follows the calendar's grid (step_minutes).
package ui
