package calendarsync

// FromGoogleEvent lets the external tests read the Google fake's events
// as the Syncer sees them.
var FromGoogleEvent = fromGoogle
