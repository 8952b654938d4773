package actor

import (
	"github.com/bookline/bookline/data"
)

// Recorded answers cmd from the index alone when its request id was already
// decided: the recorded reply (JSON) when the fingerprint matches, an
// idempotency_key_reused rejection when it does not. seen is false when the
// request id has no record yet. Publishers use it for commands that
// JetStream dropped as duplicates (their answer went to the first sender).
func Recorded(tx *data.Tx, cmd *Command, fingerprint string) (reply []byte, seen bool, err error) {
	r, seen, err := recorded(tx, &Decoded{Cmd: *cmd, Fingerprint: fingerprint})
	if !seen || err != nil {
		return nil, seen, err
	}
	reply, err = MarshalReply(r)
	return reply, true, err
}

// RecordJSON renders a request record's reply as the JSON that was sent.
func RecordJSON(rec data.RequestRecord) ([]byte, error) {
	r, err := ReplyFromRecord(rec)
	if err != nil {
		return nil, err
	}
	return MarshalReply(&r)
}

// BinaryToJSON renders a reply stored by AppendReply as JSON.
func BinaryToJSON(b []byte) ([]byte, error) {
	r, err := DecodeReply(b)
	if err != nil {
		return nil, err
	}
	return MarshalReply(&r)
}
