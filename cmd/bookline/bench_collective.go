package main

import (
	"fmt"
	"math/rand/v2"

	"github.com/bookline/bookline/queue"
)

// pairPicker draws the two calendars of a collective booking so that they
// are always in different partitions of the target: the case the
// collective scenario measures is a two-phase commit across two partition
// writers, not one writer deciding both members.
type pairPicker struct {
	partOf []int   // calendar index -> partition
	others [][]int // partition -> indexes of the calendars in every other partition
}

// newPairPicker places the scenario's calendars in their partitions; it
// fails when they are all in one (too few calendars, or one partition).
func newPairPicker(c benchConfig) (*pairPicker, error) {
	if c.partitions < 2 {
		return nil, fmt.Errorf("--partitions %d: the collective scenario needs calendars in at least two partitions", c.partitions)
	}
	p := &pairPicker{partOf: make([]int, c.calendars), others: make([][]int, c.partitions)}
	for i := range p.partOf {
		p.partOf[i] = queue.PartitionOf(c.calendarID(i), c.partitions)
	}
	used := map[int]bool{}
	for part := range p.others {
		for i, q := range p.partOf {
			if q != part {
				p.others[part] = append(p.others[part], i)
			} else {
				used[part] = true
			}
		}
	}
	if len(used) < 2 {
		return nil, fmt.Errorf("--calendars %d with --partitions %d: every calendar is in one partition; the collective scenario needs more calendars", c.calendars, c.partitions)
	}
	return p, nil
}

// pick draws a calendar at random, then one at random among those of the
// other partitions.
func (p *pairPicker) pick(rng *rand.Rand) (a, b int) {
	a = rng.IntN(len(p.partOf))
	o := p.others[p.partOf[a]]
	return a, o[rng.IntN(len(o))]
}
