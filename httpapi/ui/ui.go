package ui

import _ "embed"

// Script is the <bookline-booking> web component, served at /ui/bookline.js.
//
//go:embed bookline.js
var Script []byte

// PageTemplate is the html/template source of the /book/{calendarId} page:
// .CalendarID, .Key (the publishable key, "" on an open API) and .Script
// (the script's URL) are filled in.
//
//go:embed page.html
var PageTemplate string
