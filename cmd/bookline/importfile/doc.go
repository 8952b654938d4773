// Package importfile turns the files bookline import reads (CSV, NDJSON,
// iCalendar) into validated commands, each row's request id derived from
// its content. It only parses: publishing the commands is the importer's.
// Error texts name bookline import's flags (--calendar): they are printed
// as they are, as file:line: reason.
package importfile
