package calendarsync

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOnlyTheGoogleProviderSpeaksGoogle: the Syncer's logic reaches the
// external calendar through Provider only; Google's API client is
// imported by the Google provider (google.go) and its credentials
// (creds.go), nowhere else in the package.
func TestOnlyTheGoogleProviderSpeaksGoogle(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"google.go": true, "creds.go": true}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || allowed[f] {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "google.golang.org/api/") {
				t.Errorf("%s imports %s: Google's API belongs behind Provider (google.go)", f, p)
			}
		}
	}
}
