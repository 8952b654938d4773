package main

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookline/bookline/actor"
)

func TestInvariantMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	registerInvariantMetrics(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "bookline_invariant_violations_total" {
		t.Fatalf("families %v, want bookline_invariant_violations_total alone", mfs)
	}
	var labels []string
	for _, m := range mfs[0].GetMetric() {
		if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "invariant" || m.GetCounter() == nil {
			t.Fatalf("series %v, want a counter with the label invariant", m)
		}
		labels = append(labels, m.GetLabel()[0].GetValue())
	}
	slices.Sort(labels)
	want := slices.Sorted(slices.Values(actor.Invariants))
	if !slices.Equal(labels, want) {
		t.Errorf("invariants %v, want %v", labels, want)
	}
}
