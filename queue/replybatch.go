package queue

import (
	"bytes"
	"errors"

	"github.com/nats-io/nats.go"
)

// replyBatches gathers the answers of one batch that their commands asked
// for in bulk (HeaderReplyBatch), per subject, and publishes them as lines
// of "<Bookline-Reply-To> <reply>\n", a message every maxReplyBatchBytes.
// It belongs to one partition's goroutine.
type replyBatches struct {
	subjects []string
	bufs     []*bytes.Buffer
	// spare keeps a buffer of the last batch for the next, unless it grew
	// past what answering one batch needs.
	spare []*bytes.Buffer
}

// maxReplyBatchBytes bounds a message of answers: well below any
// max_payload a server is likely to have (1 MiB by default), and large
// enough that a batch of MaxBatch answers takes a few messages.
const maxReplyBatchBytes = 256 << 10

// add queues reply for the reply subject to under the bulk subject, and
// reports whether it did. It does not when bulk is not a valid reply
// subject or the reply holds a line break (which a reply encoded by this
// build never does): the caller answers on to instead.
func (r *replyBatches) add(nc *nats.Conn, bulk, to string, reply []byte) bool {
	if !ValidReplySubject(bulk) || bytes.IndexByte(reply, '\n') >= 0 {
		return false
	}
	limit := min(maxReplyBatchBytes, max(int(nc.MaxPayload()), 1))
	if len(to)+len(reply)+2 > limit {
		return false
	}
	i := 0
	for i < len(r.subjects) && r.subjects[i] != bulk {
		i++
	}
	if i == len(r.subjects) {
		r.subjects = append(r.subjects, bulk)
		var b *bytes.Buffer
		if n := len(r.spare); n > 0 {
			b, r.spare = r.spare[n-1], r.spare[:n-1]
		} else {
			b = new(bytes.Buffer)
		}
		r.bufs = append(r.bufs, b)
	}
	b := r.bufs[i]
	if b.Len()+len(to)+len(reply)+2 > limit {
		if err := nc.Publish(bulk, b.Bytes()); err != nil {
			return false
		}
		b.Reset()
	}
	b.WriteString(to)
	b.WriteByte(' ')
	b.Write(reply)
	b.WriteByte('\n')
	return true
}

// flush publishes what add gathered.
func (r *replyBatches) flush(nc *nats.Conn) error {
	var errs []error
	for i, subj := range r.subjects {
		b := r.bufs[i]
		if b.Len() > 0 {
			if err := nc.Publish(subj, b.Bytes()); err != nil {
				errs = append(errs, err)
			}
		}
		b.Reset()
		if b.Cap() <= 2*maxReplyBatchBytes && len(r.spare) < 2 {
			r.spare = append(r.spare, b)
		}
		r.bufs[i] = nil
	}
	r.subjects, r.bufs = r.subjects[:0], r.bufs[:0]
	return errors.Join(errs...)
}
