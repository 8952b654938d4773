// Package docs holds bookline's documentation. It is a Go package only so
// that the binary can embed openapi.yaml from here (go:embed cannot reach a
// parent directory): the spec is kept once, beside the documents that link
// to it.
package docs
