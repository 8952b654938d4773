package ui

import _ "embed"

// Script is the <bookline-booking> web component, served at /ui/bookline.js.
//
//go:embed bookline.js
var Script []byte

// PageTemplate is the html/template source of the /book/{calendarId},
// /book/pool/{poolId} and /book/team/{calendarIds} pages: .CalendarID,
// .PoolID or .CalendarIDs (ids separated by commas), .Key (the publishable
// key, "" on an open API), .Date (the day to open on, or "") and .Script
// (the script's URL) are filled in.
//
//go:embed page.html
var PageTemplate string
