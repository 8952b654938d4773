package httpapi_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/bookline/bookline"

// under says whether import path dep is path or a package under it
// (path "github.com/nats-io/" names every package of that owner).
func under(dep, path string) bool {
	path = strings.TrimSuffix(path, "/")
	return dep == path || strings.HasPrefix(dep, path+"/")
}

// TestImportBoundaries: the adapters (httpapi: Fiber; queue: NATS;
// calendarsync: Google; httpapi/webhook: webhook delivery over NATS) meet
// only in cmd/bookline. Each depends on the domain (actor, data) and on
// the interfaces it declares, never on another adapter, so the HTTP API
// builds without NATS: its webhook port speaks the NATS-free endpoint
// model, and the JetStream consumer behind it is wired in cmd/bookline.
// The whole dependency graph of each package is checked (go list -deps),
// so a transport pulled in through a third package fails too.
func TestImportBoundaries(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list dependencies with")
	}
	const (
		nats   = "github.com/nats-io/"
		fiber  = "github.com/gofiber/"
		google = "google.golang.org/api/"
	)
	endpoint := module + "/httpapi/webhook/endpoint"
	rules := map[string]struct{ forbid, allow []string }{
		"httpapi":                  {forbid: []string{nats, google, module + "/queue", module + "/calendarsync", module + "/httpapi/webhook"}, allow: []string{endpoint}},
		"httpapi/webhook":          {forbid: []string{fiber, google, module + "/queue", module + "/calendarsync", module + "/httpapi"}, allow: []string{endpoint}},
		"httpapi/webhook/endpoint": {forbid: []string{nats, fiber, google, module}},
		"queue":                    {forbid: []string{fiber, google, module + "/httpapi", module + "/calendarsync"}},
		"calendarsync":             {forbid: []string{nats, fiber, module + "/httpapi", module + "/queue"}},
		"actor":                    {forbid: []string{nats, fiber, google, module + "/httpapi", module + "/queue", module + "/calendarsync"}},
		"data":                     {forbid: []string{nats, fiber, google, module + "/httpapi", module + "/queue", module + "/calendarsync"}},
	}
	for pkg, r := range rules {
		path := module + "/" + pkg
		out, err := exec.Command(goBin, "list", "-deps", path).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", path, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 2 || deps[len(deps)-1] != path {
			t.Fatalf("go list -deps %s listed %d packages, not ending with the package: %.200s", path, len(deps), out)
		}
	deps:
		for _, dep := range deps[:len(deps)-1] { // the last is pkg itself
			for _, ok := range r.allow {
				if under(dep, ok) {
					continue deps
				}
			}
			for _, no := range r.forbid {
				if under(dep, no) {
					t.Errorf("%s depends on %s (forbidden: %s)", pkg, dep, no)
				}
			}
		}
	}
}
