package data

import "strings"

var keyTzdata = []byte("tzdata") // meta: time zone data releases that decided the index

// TzdataUnknown stands, in TzdataVersions, for the decisions an index holds
// from before it recorded its time zone data (which then came from the host).
const TzdataUnknown = "unknown"

// TzdataVersions lists the releases of the time zone database (e.g.
// "2025c") with which the commands of this index were decided, comma
// separated in the order they were first used; "" when none is recorded.
// More than one means that the index was decided partly with other zone
// rules than a replay by one build would use.
func (t *Tx) TzdataVersions() string {
	return string(t.bucket(bucketMeta).Get(keyTzdata))
}

// NoteTzdata records that the commands applied from now on are decided
// with release version: appended to TzdataVersions unless it is the last
// one already. An index that holds decisions but no releases gets
// TzdataUnknown first. It returns the list as recorded.
func (t *Tx) NoteTzdata(version string) (string, error) {
	cur := t.TzdataVersions()
	list := strings.Split(cur, ",")
	switch {
	case cur == "" && len(t.Applied()) > 0:
		list = []string{TzdataUnknown, version}
	case cur == "":
		list = []string{version}
	case list[len(list)-1] != version:
		list = append(list, version)
	}
	next := strings.Join(list, ",")
	if next == cur {
		return cur, nil
	}
	return next, t.bucket(bucketMeta).Put(keyTzdata, []byte(next))
}
