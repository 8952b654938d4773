package main

import (
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/queue"
)

// reply is the part of bookline's answer we count.
type reply struct {
	Outcome string `json:"outcome"` // accepted or rejected
	Code    string `json:"code"`    // why rejected: slot_taken, calendar_not_found, ...
	Seq     uint64 `json:"seq"`     // stream sequence of the decision
}

func main() {
	url := flag.String("nats-url", nats.DefaultURL, "NATS server URL")
	file := flag.String("file", "bookings.csv", "CSV file: calendar_id,start,end,customer")
	wait := flag.Duration("wait", 30*time.Second, "how long to wait for outcomes")
	nkey := flag.String("nkey", "", "nkey seed file, when the server asks for credentials (`bookline nats-credentials --role importer > importer.nk`)")
	flag.Parse()

	cmds := readCSV(*file)
	var opts []nats.Option
	if *nkey != "" {
		o, err := nats.NkeyOptionFromSeed(*nkey)
		if err != nil {
			log.Fatal(err)
		}
		opts = append(opts, o)
	}
	nc, err := nats.Connect(*url, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	// At most 256 publishes wait for their stream acknowledgement at once.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
	if err != nil {
		log.Fatal(err)
	}

	// One subscription receives every outcome; each row gets its own reply
	// subject under it (inbox.<row>). Subscribe before publishing.
	inbox := nats.NewInbox()
	replies := make(chan *nats.Msg, len(cmds))
	sub, err := nc.ChanSubscribe(inbox+".*", replies)
	if err != nil {
		log.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)

	futures := make([]jetstream.PubAckFuture, len(cmds))
	for i := range cmds {
		// The same row always gets the same Nats-Msg-Id (request id and
		// fingerprint): a re-run within the stream's dedupe window is
		// dropped by JetStream.
		msg, err := queue.CommandMsg(context.Background(), &cmds[i], cmds[i].Fingerprint(), inbox+"."+strconv.Itoa(i))
		if err != nil {
			log.Fatalf("row %d: %v", i+1, err)
		}
		if futures[i], err = js.PublishMsgAsync(msg); err != nil {
			log.Fatalf("publish row %d: %v", i+1, err)
		}
	}

	// The PubAck tells us the stream sequence of each stored command, or
	// that JetStream dropped it as a duplicate (then no outcome will come).
	ackSeq := map[string]uint64{}
	counts := map[string]int{}
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				counts["duplicate"]++
			} else {
				ackSeq[inbox+"."+strconv.Itoa(i)] = ack.Sequence
			}
		case err := <-f.Err():
			counts["publish failed"]++
			log.Printf("row %d: %v", i+1, err)
		}
	}

	// Collect the outcomes. An outcome whose seq is older than our publish
	// is the recorded answer of an earlier run: a duplicate.
	timeout := time.After(*wait)
	for left := len(ackSeq); left > 0; left-- {
		select {
		case m := <-replies:
			var r reply
			if err := json.Unmarshal(m.Data, &r); err != nil {
				counts["unreadable reply"]++
			} else if r.Seq < ackSeq[m.Subject] {
				counts["duplicate"]++
			} else if r.Outcome == "accepted" {
				counts["accepted"]++
			} else {
				counts["rejected: "+r.Code]++
			}
		case <-timeout:
			counts["no outcome yet"] += left
			left = 0
		}
	}
	fmt.Printf("%d rows\n", len(cmds))
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		fmt.Printf("  %-30s %d\n", k, counts[k])
	}
}

// readCSV turns each row into a validated booking.create command. The
// request id is a hash of the row's content (times in UTC), never a line
// number or a timestamp, so the same booking keeps the same id across runs.
func readCSV(path string) []actor.Command {
	f, err := os.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1 // rows may carry extra columns
	records, err := r.ReadAll()
	if err != nil {
		log.Fatal(err)
	}
	var cmds []actor.Command
	for i, rec := range records {
		if i == 0 || len(rec) < 4 { // header, short rows
			continue
		}
		start, err1 := time.Parse(time.RFC3339, rec[1])
		end, err2 := time.Parse(time.RFC3339, rec[2])
		if err1 != nil || err2 != nil {
			log.Printf("line %d: start and end must be RFC 3339 times, skipped", i+1)
			continue
		}
		b := actor.BookingSpec{Start: start.UTC(), End: end.UTC(), Customer: rec[3]}
		sum := sha256.Sum256([]byte(strings.Join([]string{rec[0], b.Start.Format(time.RFC3339Nano), b.End.Format(time.RFC3339Nano), b.Customer}, "\x00")))
		cmd := actor.Command{V: actor.SchemaVersion, Type: actor.TypeBookingCreate, RequestID: "ex." + hex.EncodeToString(sum[:16]), CalendarID: rec[0], Booking: &b}
		// A fingerprint is only defined for a validated command, and the
		// writer would refuse an invalid one anyway.
		if errs := cmd.Validate(); len(errs) > 0 {
			log.Printf("line %d: %s: %s, skipped", i+1, errs[0].Field, errs[0].Message)
			continue
		}
		cmds = append(cmds, cmd)
	}
	return cmds
}
