// Package webhook delivers bookline's outcome events to HTTP endpoints,
// signed as the Standard Webhooks specification describes
// (https://www.standardwebhooks.com): headers webhook-id, webhook-timestamp
// and webhook-signature, "v1," + base64 HMAC-SHA256 of
// "<id>.<timestamp>.<body>" keyed with the base64-decoded part of a
// "whsec_" secret.
//
// Where the pieces live:
//
//   - endpoint configuration (url, event types, calendars, secrets, the
//     consumer generation) and delivery status are kept in the NATS KV bucket
//     BucketName, on the same servers and with the same replicas as the
//     streams, so every instance of a cluster sees the same endpoints;
//     nothing of it is in the bbolt index;
//   - each enabled endpoint has one durable pull consumer on the outcome event
//     stream (BOOKLINE_EVT), so NATS, not bookline, remembers how far it got;
//     the consumer allows one unacknowledged event (MaxAckPending 1), which
//     makes deliveries to an endpoint follow the stream's order (hence the
//     order per calendar), also across restarts and redeliveries;
//   - every instance runs a delivery loop per enabled endpoint and pulls in
//     the consumer's pinned priority group: the server hands the events to
//     one puller at a time, and to another one once the pinned one stops
//     pulling for PinnedTTL.
//
// Caveats:
//
//   - a loop sends an event only under a lease on it (lease.go): NATS gives
//     the event to another puller only AckWait after the last confirmed "in
//     progress", so no attempt starts, and none runs on, past that moment
//     or while NATS is unreachable; a graceful stop lets the attempt in
//     flight finish and acks it;
//   - delivery is at least once: an event delivered but whose ack did not
//     reach NATS (a crash, a cut connection between the receiver's 2xx and
//     the ack) is delivered again, by the next instance, with the same
//     webhook-id; receivers dedupe by it;
//   - an endpoint that fails holds back its own later events (that is what
//     keeps them in order) until the retry schedule is spent, then it is
//     disabled; other endpoints and the partition writers never wait for it;
//   - the delivery rate of one endpoint is bounded by its round trip (one
//     event in flight);
//   - the secrets are stored in the KV bucket sealed with the secrets key
//     (Config.Key, seal.go): HMAC needs them, a copy of the bucket must not
//     leak them; every instance must have the same key.
//
// Dependencies: nats.go (the KV bucket and the consumers), the standard
// library, the endpoint model (package endpoint, beside this one: the
// types the HTTP API shares with it, without NATS), data/secretkey (the
// sealing key) and actor for the one rule of a calendar id
// (actor.ValidCalendarID, checked on an endpoint's calendars) and the one
// reader of an outcome event's payload (actor.ReadReply, for its webhook
// type). It is an
// adapter of its own: it imports neither httpapi nor queue, and httpapi
// does not import it. The HTTP routes that manage endpoints are in
// httpapi, which declares the port it needs (httpapi.Webhooks);
// cmd/bookline opens the Manager on the node's NATS connection and passes
// it to the API as that port.
package webhook
