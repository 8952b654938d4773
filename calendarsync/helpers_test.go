package calendarsync

import (
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

func bookingForTest() data.Booking {
	s := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	return data.Booking{ID: actor.BookingID("cal", "req"), CalendarID: "cal", Start: s, End: s.Add(time.Hour), Customer: "ann", Status: data.StatusConfirmed}
}
