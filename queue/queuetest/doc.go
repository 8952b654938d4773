// Package queuetest starts NATS JetStream clusters inside a test process.
package queuetest
