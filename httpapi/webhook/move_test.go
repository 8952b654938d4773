package webhook

import "testing"

// TestMoveEventTypes: a member's applied move of a collective is that
// calendar's booking.rescheduled, as a reschedule of one calendar is; the
// other steps of a move are no booking event.
func TestMoveEventTypes(t *testing.T) {
	for payload, want := range map[string]string{
		`{"type":"collective.move_commit","outcome":"accepted"}`: EventBookingRescheduled,
		`{"type":"collective.move_commit","outcome":"rejected"}`: EventCommandRejected,
		`{"type":"collective.move","outcome":"accepted"}`:        EventCommandAccepted,
		`{"type":"collective.move_abort","outcome":"accepted"}`:  EventCommandAccepted,
	} {
		if got := EventType([]byte(payload)); got != want {
			t.Errorf("%s: %s, want %s", payload, got, want)
		}
	}
}
