package ui

import _ "embed"

// Script is the <bookline-booking> web component, served at /ui/bookline.js.
//
//go:embed bookline.js
var Script []byte

// PageTemplate is the html/template source of the /book/{calendarId} and
// /book/pool/{poolId} pages: .CalendarID or .PoolID, .Key (the publishable
// key, "" on an open API), .Date (the day to open on, or "") and .Script
// (the script's URL) are filled in.
//
//go:embed page.html
var PageTemplate string
