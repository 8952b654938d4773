package webhook

import (
	"slices"
	"testing"
)

func TestBatchFiltersAndSubjects(t *testing.T) {
	m := &Manager{cfg: Config{SubjectPrefix: "bookline.evt.", BatchSubjectPrefix: "bookline.evt-batch.",
		PartitionOf: func(cal string) int { return len(cal) % 3 }}}
	all := &loop{m: m}
	some := &loop{m: m, calendars: []string{"ab", "cd", "xyz"}}
	if got := all.filters(); !slices.Equal(got, []string{"bookline.evt.*", "bookline.evt-batch.*"}) {
		t.Errorf("filters of every calendar: %v", got)
	}
	if got := some.filters(); !slices.Equal(got, []string{"bookline.evt.ab", "bookline.evt.cd", "bookline.evt.xyz", "bookline.evt-batch.0", "bookline.evt-batch.2"}) {
		t.Errorf("filters of some calendars: %v", got)
	}
	m.cfg.BatchSubjectPrefix = ""
	if got := some.filters(); !slices.Equal(got, []string{"bookline.evt.ab", "bookline.evt.cd", "bookline.evt.xyz"}) {
		t.Errorf("filters without batches: %v", got)
	}
	for subject, want := range map[string][2]bool{
		"bookline.evt.ab":      {true, true},
		"bookline.evt.zz":      {true, false},
		"bookline.evt-invalid": {false, false},
		"bookline.evt.":        {false, false},
		"bookline.evt.a.b":     {false, false},
	} {
		if got := [2]bool{all.wantsSubject(subject), some.wantsSubject(subject)}; got != want {
			t.Errorf("%s: wanted by (all, some) %v, want %v", subject, got, want)
		}
	}
	lines, bad := splitBatch([]byte(`{"subject":"bookline.evt.ab","msg_id":"evt-1-7","command_stream":"BOOKLINE_CMD@x","command_seq":7,"event":{"seq":7}}
not json
{"subject":"bookline.evt.cd","command_stream":"BOOKLINE_CMD@x","command_seq":8,"part":2,"event":{"seq":8}}
`))
	if bad != 1 || len(lines) != 2 || lines[0].id() != "evt-1-7" || string(lines[0].Event) != `{"seq":7}` || lines[1].id() != "evt-8.2" {
		t.Fatalf("split: %+v, %d bad", lines, bad)
	}
}
