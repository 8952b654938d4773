package actor

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
)

// BenchmarkAvailabilityWorstAccepted measures the most expensive
// availability query the API accepts, on a calendar open at all times with
// 5,000 bookings in the range: the longest range (62 days), the smallest
// step that range allows (15 minutes: 5,952 candidates), and the longest
// duration (168h, every start refused), a short one (1m, about half
// listed) and, on an empty calendar, every start listed; and a calendar
// with the most opening-hour rules allowed (1-hour starts). impl=reference is
// the per-start check the sweep replaced, for comparison (about a second
// per query; run it with -benchtime 3x). cpu-ns/op is the process's CPU
// time per query, which other load on the machine disturbs less than the
// wall clock.
func BenchmarkAvailabilityWorstAccepted(b *testing.B) {
	s, err := data.Open(filepath.Join(b.TempDir(), "index.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	from := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC) // across the October DST change
	to := from.Add(MaxAvailabilityRange)
	const bookings = 5000
	err = s.Commit(func(tx *data.Tx) error {
		for _, id := range []string{"full", "empty"} {
			if err := tx.PutCalendar(data.Calendar{ID: id, Timezone: "Europe/Berlin"}); err != nil {
				return err
			}
		}
		if err := tx.PutCalendar(data.Calendar{ID: "hours", Timezone: "Europe/Berlin", Rules: busyRules(from)}); err != nil {
			return err
		}
		gap := MaxAvailabilityRange / bookings
		for i := range bookings {
			start := from.Add(time.Duration(i) * gap).Truncate(time.Minute)
			bk := data.Booking{ID: data.BookingID("full", fmt.Sprintf("r%d", i)), CalendarID: "full", Start: start,
				End: start.Add(10 * time.Minute), Customer: "c", Status: data.StatusConfirmed, CreatedAt: from}
			if err := tx.PutBooking(bk); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	step := 15 * time.Minute
	if n := AvailabilityCandidates(from, to, step); n > MaxAvailabilityCandidates || AvailabilityCandidates(from, to, step-time.Minute) <= MaxAvailabilityCandidates {
		b.Fatalf("15m is not the smallest step accepted over the range (%d candidates)", n)
	}
	now := from.Add(-time.Hour)
	for _, impl := range []string{"sweep", "reference"} {
		for _, c := range []struct {
			cal string
			d   time.Duration
		}{{"full", MaxBookingDuration}, {"full", time.Minute}, {"empty", MaxBookingDuration}, {"hours", time.Hour}} {
			b.Run(fmt.Sprintf("impl=%s/calendar=%s/duration=%s", impl, c.cal, c.d), func(b *testing.B) {
				query := Availability
				if impl == "reference" {
					query = availabilityReference
				}
				var slots int
				b.ReportAllocs()
				cpu0 := processCPU()
				for b.Loop() {
					err := s.View(func(tx *data.Tx) error {
						cal, err := tx.Calendar(c.cal)
						if err != nil {
							return err
						}
						out, err := query(tx, &cal, from, to, c.d, step, now)
						slots = len(out)
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(slots), "slots")
			})
		}
	}
}

// busyRules has the most rule intervals allowed: opening hours on
// weekdays and date overrides for every day of the range and beyond.
func busyRules(from time.Time) data.Rules {
	day := []data.TimeRange{{Start: "08:00", End: "12:00"}, {Start: "13:00", End: "18:00"}}
	r := data.Rules{WeeklyHours: map[string][]data.TimeRange{"mon": day, "tue": day, "wed": day, "thu": day, "fri": day}}
	for i := 0; len(r.DateOverrides)*3+10 <= MaxRuleIntervals; i++ {
		r.DateOverrides = append(r.DateOverrides, data.DateOverride{Date: from.AddDate(0, 0, i).Format(time.DateOnly),
			Hours: []data.TimeRange{{Start: "07:00", End: "11:00"}, {Start: "11:00", End: "19:00"}}})
	}
	return r
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
