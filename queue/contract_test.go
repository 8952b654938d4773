package queue

import "testing"

func TestValidReplySubject(t *testing.T) {
	for subj, want := range map[string]bool{
		"_INBOX.abc.def":          true,
		"_INBOX.bookline.x.tok":   true,
		"":                        false,
		"_INBOX.":                 false,
		"_INBOX_importer1.x":      true,
		"_INBOXES.x":              false,
		"bookline.cmd.alice":      false,
		"$JS.API.STREAM.DELETE.X": false,
		"_INBOX.a.>":              false,
		"_INBOX.a b":              false,
	} {
		if got := ValidReplySubject(subj); got != want {
			t.Errorf("ValidReplySubject(%q) = %v, want %v", subj, got, want)
		}
	}
	if PartitionOf("alice", 8) != PartitionOf("alice", 8) || PartitionOf("alice", 1) != 0 {
		t.Error("PartitionOf is not a function of its input")
	}
}
