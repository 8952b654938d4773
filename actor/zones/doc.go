// Package zones loads time zones from the IANA time zone database built
// into bookline, never from the host.
//
// Opening hours, the slot grid, DST and whether a zone name exists are part
// of every decision, and decisions must be the same on every instance, in
// every replay and after every rebuild. time.LoadLocation reads $ZONEINFO
// and the system's zoneinfo first (time/tzdata is only its fallback), so two
// hosts with different OS images, or one host before and after an OS
// update, could decide the same log differently. Load reads only
// zoneinfo.zip, embedded here: the data of one release (Version), the same
// file time/tzdata embeds, copied from the Go toolchain by gen.go.
//
// Changing the data (go generate, after a Go upgrade) changes decisions for
// calendars whose zone rules changed between the releases. The index
// records which releases decided it (data.Tx.TzdataVersions); serve
// reports an index decided with another release at start, and the digest
// carries the releases, so verify tells them apart.
package zones
