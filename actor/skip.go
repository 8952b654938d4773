package actor

import (
	"fmt"

	"github.com/bookline/bookline/data"
)

// decideSkip decides a partition.skip when the partition reaches it in
// order. What it asks for already happened, or never will: its command
// was answered command_skipped when the partition reached that command
// (apply finds the skip ahead of it in the log, see atLevel), or it was
// not and cannot be any more. So the skip is accepted when the index says
// that this skip skipped its command, and otherwise refused not_stopped;
// either answer is recorded.
func decideSkip(tx *data.Tx, p int, d *Decoded) (Reply, error) {
	target := d.Cmd.Skip.Seq
	by, skipped := tx.SkippedBy(p, target)
	switch {
	case skipped && by == d.Seq:
		r := d.accept()
		r.Message = fmt.Sprintf("stream seq %d skipped: it was answered %s and not decided", target, CodeCommandSkipped)
		return r, nil
	case skipped:
		return d.reject(CodeNotStopped, fmt.Sprintf("stream seq %d was skipped by the partition.skip at stream seq %d, not by this one", target, by)), nil
	}
	return d.reject(CodeNotStopped, fmt.Sprintf("stream seq %d was not skipped: the partition did not stop at it "+
		"(it was decided, is not a command of this partition, or does not come before this command)", target)), nil
}

// isSystemCommand reports whether c is one of the version 2 commands about
// a partition rather than a calendar (schema.upgrade, partition.skip).
func isSystemCommand(c *Command) bool {
	return c.V >= 2 && (c.Type == TypeSchemaUpgrade || c.Type == TypePartitionSkip)
}
