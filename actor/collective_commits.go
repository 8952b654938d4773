package actor

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/bookline/bookline/data"
)

// Batched commits of vote-decided collectives (schema version 5).
//
// A collective decided by its members' votes is committed once every
// member voted yes; what follows only applies that decision on each
// member, and each collective.commit is one command of the log: a
// publish, a stored message, a decision, a reply. Under load the log's
// per-command cost is what bounds throughput, so the commits of many
// collectives are gathered into one collective.commits per partition:
// one command applies each entry as collective.commit applies its part.
//
// A writer owns only its partition's calendars: an entry whose calendar
// hashes to another partition is refused, never applied. That needs the
// stream's partition count where the command is decided
// (Input.Partitions), a property of the stream fixed when it was created,
// so every writer and every replay of the log decides the same.

// TypeCollectiveCommits commits the parts of many collectives on one
// partition's calendars.
const TypeCollectiveCommits = "collective.commits"

// MaxCommitEntries bounds the entries of one collective.commits.
const MaxCommitEntries = 256

// CommitsTokenPrefix starts the subject tokens the HTTP API publishes
// collective.commits to (CommitsToken). They are within the calendar ids
// reserved for bookline, and apart from the system tokens, whose few
// messages a writer reads one by one (a skip, the upgrade marker).
const CommitsTokenPrefix = "_bookline-commits-"

// PartitionOf is the partition of subject token tok among n: FNV-1a 32 of
// the token mod n, what the stream's subject transform {{partition(n,1)}}
// computes on ingest.
func PartitionOf(tok string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(tok))
	return int(h.Sum32() % uint32(n))
}

// CommitsToken is the token the API publishes partition p's
// collective.commits to, among n partitions: the first of
// "_bookline-commits-0", "_bookline-commits-1", ... that PartitionOf maps
// to p. Any token of the partition would be decided the same.
func CommitsToken(p, n int) string {
	for k := 0; ; k++ {
		if tok := CommitsTokenPrefix + strconv.Itoa(k); PartitionOf(tok, n) == p {
			return tok
		}
	}
}

// CommitEntry is one part a collective.commits commits: the collective id
// on one member calendar, and the collective's calendars.
type CommitEntry struct {
	CalendarID  string   `json:"calendar_id"`
	ID          string   `json:"id"`
	CalendarIDs []string `json:"calendar_ids"`
}

// CommitsSpec is the commits member of collective.commits.
type CommitsSpec struct {
	Entries []CommitEntry
	// bad is set when the member was not a list of entries.
	bad bool
}

// UnmarshalJSON reads the commits member and never fails, for the reasons
// CollectiveSpec's does: a command of an earlier version that carries a
// member named commits is decided without it.
func (s *CommitsSpec) UnmarshalJSON(b []byte) error {
	var v []CommitEntry
	if err := json.Unmarshal(b, &v); err != nil {
		*s = CommitsSpec{bad: true}
		return nil
	}
	*s = CommitsSpec{Entries: v}
	return nil
}

// MarshalJSON writes the entries as a list.
func (s CommitsSpec) MarshalJSON() ([]byte, error) { return json.Marshal(s.Entries) }

// CommitsCommand is a collective.commits of entries under request id
// reqID, published to token (CommitsToken of the entries' partition).
func CommitsCommand(token, reqID string, entries []CommitEntry, recordTTL int) *Command {
	return &Command{V: CollectiveVotesSchemaVersion, Type: TypeCollectiveCommits, RequestID: reqID, CalendarID: token,
		RecordTTLSeconds: recordTTL, Commits: &CommitsSpec{Entries: entries}}
}

// validateCommits checks the commits member (a command of version 5 and
// up): required by collective.commits, ignored (dropped) on every other
// type, which does not use it.
func (c *Command) validateCommits() []FieldError {
	if c.Type != TypeCollectiveCommits {
		c.Commits = nil
		return nil
	}
	s := c.Commits
	if s == nil || s.bad || len(s.Entries) == 0 || len(s.Entries) > MaxCommitEntries {
		return []FieldError{{Field: "commits", Message: fmt.Sprintf("must list 1 to %d entries: calendar_id, id, calendar_ids", MaxCommitEntries)}}
	}
	var errs []FieldError
	for i, e := range s.Entries {
		f := "commits[" + strconv.Itoa(i) + "]"
		switch n := len(e.CalendarIDs); {
		case !ValidCalendarID(e.CalendarID):
			errs = append(errs, FieldError{Field: f + ".calendar_id", Message: "must match [A-Za-z0-9_-]{1,64}"})
		case !ValidBookingID(e.ID):
			errs = append(errs, FieldError{Field: f + ".id", Message: "is not a collective id"})
		case n < 2 || n > MaxMembers || !strictlyAscending(e.CalendarIDs) ||
			slices.ContainsFunc(e.CalendarIDs, func(id string) bool { return !ValidCalendarID(id) }):
			errs = append(errs, FieldError{Field: f + ".calendar_ids", Message: fmt.Sprintf("must list 2 to %d valid calendars, distinct, in ascending order", MaxMembers)})
		case !slices.Contains(e.CalendarIDs, e.CalendarID):
			errs = append(errs, FieldError{Field: f + ".calendar_id", Message: "must be one of its calendar_ids"})
		}
		if len(errs) >= 8 {
			break // enough to see what is wrong; the reply stays small
		}
	}
	if c.Booking != nil || c.BookingID != "" {
		errs = append(errs, FieldError{Field: "booking", Message: "collective.commits has no booking"})
	}
	return errs
}

// commitsFingerprint is what a collective.commits adds to its
// fingerprint's body: the same request only with the same entries.
func (c *Command) commitsFingerprint() []byte {
	if c.V < CollectiveVotesSchemaVersion || c.Type != TypeCollectiveCommits || c.Commits == nil {
		return nil
	}
	out, _ := json.Marshal(struct {
		Commits []CommitEntry `json:"commits"`
	}{c.Commits.Entries})
	return out
}

// decideCommits decides a collective.commits: each entry, in order, as a
// collective.commit of that part on its calendar would be decided (the
// pending part confirmed and mirrored; a part confirmed or cancelled
// already stays as it is), except that an entry of another partition's
// calendar, of a part that is missing or aborted, or of a collective
// hold's part (whose commit is its coordinator's decision) is not
// applied: those are listed in the reply's details. Every part it
// confirms leaves the outcome event its collective.commit would have
// (d.events), on that calendar's subject.
func decideCommits(tx *data.Tx, d *Decoded) (Reply, error) {
	n := d.msg.Partitions
	if n <= 0 || PartitionOf(d.msg.SubjectCalendar, n) != d.partition {
		// The caller passed no partition count, or a wrong one: deciding
		// without it could touch another writer's calendars.
		return Reply{}, fmt.Errorf("collective.commits at seq %d: partition count %d does not place its subject %q in partition %d",
			d.Seq, n, d.msg.SubjectCalendar, d.partition)
	}
	var details []FieldError
	refuse := func(i int, code, msg string) {
		details = append(details, FieldError{Field: "commits[" + strconv.Itoa(i) + "]", Message: code + ": " + msg})
	}
	committed, decided := 0, 0
	for i, e := range d.Cmd.Commits.Entries {
		if q := PartitionOf(e.CalendarID, n); q != d.partition {
			refuse(i, CodeInvalidRequest, fmt.Sprintf("calendar %s is in partition %d, not in this command's partition %d", e.CalendarID, q, d.partition))
			continue
		}
		ed := *d
		ed.Cmd = Command{V: d.Cmd.V, Type: TypeCollectiveCommit, RequestID: CommitRequestID(e.ID), CalendarID: e.CalendarID,
			Collective: &CollectiveSpec{ID: e.ID, CalendarIDs: e.CalendarIDs}}
		bk, found, err := collectivePart(tx, &ed)
		switch {
		case err != nil:
			return Reply{}, err
		case !found:
			refuse(i, CodeBookingNotFound, "calendar "+e.CalendarID+" has no part of collective "+e.ID)
			continue
		case bk.Status == data.StatusAborted:
			refuse(i, CodeCollectiveAborted, "the collective booking "+e.ID+" was aborted on calendar "+e.CalendarID)
			continue
		case bk.Status != data.StatusPending:
			decided++ // committed before (or cancelled since): as it is
			continue
		case bk.ExpiresAt != nil:
			refuse(i, CodeCollectivePending, "collective "+e.ID+" is a hold: its coordinator decides its commit")
			continue
		}
		r, err := commitPartSub(tx, &ed, uint32(i+1))
		if err != nil {
			return Reply{}, err
		}
		d.events = append(d.events, r)
		committed++
	}
	r := d.accept()
	r.Message = fmt.Sprintf("%d parts committed, %d decided before, %d not committed", committed, decided, len(details))
	r.Details = details
	return r, nil
}

// eventListCodec starts an outbox payload that holds the outcome events of
// several calendars decided by one command (collective.commits); a payload
// of one event starts with replyCodecVersion.
const eventListCodec = 0xe5

// appendEventList appends the outbox payload of evs: eventListCodec, their
// count, then each event's calendar and binary reply.
func appendEventList(b []byte, evs []Reply) []byte {
	b = append(b, eventListCodec)
	b = data.AppendUvarint(b, uint64(len(evs)))
	var one []byte
	for i := range evs {
		one = AppendReply(one[:0], &evs[i])
		b = data.AppendString(b, evs[i].CalendarID)
		b = data.AppendBytes(b, one)
	}
	return b
}

// EventPart is one outcome event of an outbox entry, rendered as JSON.
type EventPart struct {
	// Calendar is the calendar whose subject gets the event; "" for the
	// entry's own (data.Event.Calendar).
	Calendar string
	JSON     []byte
}

// EventParts renders an outbox payload: one event, or the events of every
// part a collective.commits confirmed, in the order it confirmed them.
func EventParts(payload []byte) ([]EventPart, error) {
	if len(payload) == 0 || payload[0] != eventListCodec {
		out, err := BinaryToJSON(payload)
		if err != nil {
			return nil, err
		}
		return []EventPart{{JSON: out}}, nil
	}
	rd := data.NewReader(payload[1:])
	n := rd.Uvarint()
	if rd.Err() != nil || n == 0 || n > MaxCommitEntries {
		return nil, data.ErrCorrupt
	}
	parts := make([]EventPart, 0, n)
	for range n {
		cal := rd.String()
		one := rd.Bytes()
		if rd.Err() != nil {
			return nil, rd.Err()
		}
		out, err := BinaryToJSON(one)
		if err != nil {
			return nil, err
		}
		parts = append(parts, EventPart{Calendar: cal, JSON: out})
	}
	return parts, rd.Err()
}
