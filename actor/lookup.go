package actor

import "github.com/bookline/bookline/data"

// Recorded answers cmd from the index alone when its request id was already
// decided: the recorded reply when the fingerprint matches, an
// idempotency_key_reused rejection when it does not. seen is false when the
// request id has no record yet. Publishers use it for commands that
// JetStream dropped as duplicates (their answer went to the first sender).
func Recorded(tx *data.Tx, cmd *Command, fingerprint string) (reply []byte, seen bool, err error) {
	return recorded(tx, &Decoded{Cmd: *cmd, Fingerprint: fingerprint})
}
