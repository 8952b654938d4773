// Command bookline is the booking service (see README.md): serve, import,
// replay, verify, bench and hash-key.
//
// This is the one place where the adapters meet: serve builds the queue
// node (NATS and the partition writers), the Google sync as a follower of
// the writers, and the HTTP API on a backend that combines them
// (wire.go). Flags, the environment (BOOKLINE_<NAME>) and the config file
// are read here; there is no business logic.
package main
