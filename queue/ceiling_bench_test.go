package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/queue/queuetest"
)

// The raw ceilings of the bulk paths on this machine: what JetStream alone
// does, without bookline's decoding, deciding or index, so that a bulk
// figure (import, replay, catch-up) can be set against the machine's limit
// and not a guess. One standalone server, an R1 file stream like the
// embedded one, messages of the size of a booking command (300 B) over
// eight subjects.

const ceilingMsgBytes = 300

// ceilingStream starts a server and creates the stream CEIL (R1, file).
func ceilingStream(b *testing.B) (jetstream.JetStream, *nats.Conn) {
	b.Helper()
	nc, err := nats.Connect(queuetest.StartServer(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CEIL", Subjects: []string{"ceil.>"},
		Storage: jetstream.FileStorage, Replicas: 1}); err != nil {
		b.Fatal(err)
	}
	return js, nc
}

// ceilingPublish publishes n messages with the async publisher and waits
// for every acknowledgement.
func ceilingPublish(b *testing.B, js jetstream.JetStream, n int) {
	b.Helper()
	body := make([]byte, ceilingMsgBytes)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	for i := 0; i < n; i++ {
		if _, err := js.PublishAsync(fmt.Sprintf("ceil.%d", i%8), body); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		b.Fatal("publish did not complete")
	}
}

// BenchmarkCeilingAsyncPublish: the async publisher's rate into an R1 file
// stream (4,096 acknowledgements pending at most). One op = one message.
func BenchmarkCeilingAsyncPublish(b *testing.B) {
	js, _ := ceilingStream(b)
	b.ResetTimer()
	ceilingPublish(b, js, b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkCeilingOrderedRead: an ordered consumer reading a stream from
// its first message to its last, as a replay does (pull batches of 65,536,
// metadata parsed per message). One op = one message.
func BenchmarkCeilingOrderedRead(b *testing.B) {
	js, _ := ceilingStream(b)
	ceilingPublish(b, js, b.N)
	ctx := context.Background()
	b.ResetTimer()
	cons, err := js.OrderedConsumer(ctx, "CEIL", jetstream.OrderedConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(65536))
	if err != nil {
		b.Fatal(err)
	}
	defer it.Stop()
	for read := 0; read < b.N; read++ {
		m, err := it.Next()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Metadata(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
