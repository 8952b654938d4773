package main

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bookline/bookline/queue"
)

// TestPairPickerSpansTwoPartitions: every pair drawn is two calendars of
// the run in different partitions, and every calendar gets drawn.
func TestPairPickerSpansTwoPartitions(t *testing.T) {
	for _, tc := range []struct{ calendars, partitions int }{{100, 2}, {10, 2}, {1000, 8}, {3, 3}} {
		c := benchConfig{prefix: "r1", calendars: tc.calendars, partitions: tc.partitions}
		p, err := newPairPicker(c)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		seen := map[int]bool{}
		for range 20 * tc.calendars {
			a, b := p.pick(rng)
			if a < 0 || b < 0 || a >= tc.calendars || b >= tc.calendars {
				t.Fatalf("%+v: pair (%d, %d) outside the run's calendars", tc, a, b)
			}
			pa, pb := queue.PartitionOf(c.calendarID(a), tc.partitions), queue.PartitionOf(c.calendarID(b), tc.partitions)
			if pa == pb {
				t.Fatalf("%+v: %s and %s are both in partition %d", tc, c.calendarID(a), c.calendarID(b), pa)
			}
			seen[a], seen[b] = true, true
		}
		if len(seen) != tc.calendars {
			t.Errorf("%+v: %d of %d calendars drawn", tc, len(seen), tc.calendars)
		}
	}
}

func TestPairPickerRefusesOnePartition(t *testing.T) {
	if _, err := newPairPicker(benchConfig{prefix: "r1", calendars: 100, partitions: 1}); err == nil {
		t.Error("one partition accepted")
	}
	if _, err := newPairPicker(benchConfig{prefix: "r1", calendars: 1, partitions: 2}); err == nil || !strings.Contains(err.Error(), "one partition") {
		t.Errorf("one calendar: %v", err)
	}
}

func TestCollectivePartsFindsPartialBookings(t *testing.T) {
	parts := collectiveParts{}
	parts.add("a", []listedBooking{{ID: "whole", CalendarIDs: []string{"a", "b"}}, {ID: "half", CalendarIDs: []string{"a", "b"}}, {ID: "single"}})
	parts.add("b", []listedBooking{{ID: "whole", CalendarIDs: []string{"a", "b"}}, {ID: "outside", CalendarIDs: []string{"b", "elsewhere"}}})
	var a AuditResult
	var problems []string
	parts.check(map[string]bool{"a": true, "b": true}, &a, func(f string, args ...any) { problems = append(problems, f) })
	if a.PartialCollectives != 1 || len(problems) != 1 {
		t.Errorf("partial %d, problems %v", a.PartialCollectives, problems)
	}
}
