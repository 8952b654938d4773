package queue

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
)

// CommandMsg builds the NATS message of a validated command as bookline's
// producers publish it (docs/protocol.md, "Headers"): the command's subject
// and JSON body; Bookline-Reply-To replyTo, the subject the writer answers
// on; the schema version, request id and content type; ctx's trace id
// (WithTraceID), if it has one; Nats-Msg-Id MsgID(cmd, fingerprint) and
// Nats-Expected-Stream StreamName. The message's own reply subject is left
// to the caller: it is where JetStream acknowledges the publish. The
// headers are written here only, so that every producer sends the same.
func CommandMsg(ctx context.Context, cmd *actor.Command, fingerprint, replyTo string) (*nats.Msg, error) {
	body, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: CommandSubject(cmd.CalendarID), Data: body, Header: make(nats.Header, 8)}
	msg.Header.Set(HeaderReplyTo, replyTo)
	msg.Header.Set(HeaderSchema, strconv.Itoa(actor.SchemaVersion))
	msg.Header.Set(HeaderRequestID, cmd.RequestID)
	if trace := TraceIDFrom(ctx); trace != "" {
		msg.Header.Set(HeaderTraceID, trace)
	}
	msg.Header.Set(HeaderContentType, "application/json")
	msg.Header.Set(jetstream.MsgIDHeader, MsgID(cmd, fingerprint))
	msg.Header.Set(jetstream.ExpectedStreamHeader, StreamName)
	return msg, nil
}
