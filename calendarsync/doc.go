// Package calendarsync will mirror bookings to Google Calendar (through an
// outbox filled in the writers' transactions) and import busy time from
// Google as commands through the log. It is not built yet: see the open
// issue "Google Calendar: mirror every booking idempotently".
package calendarsync
