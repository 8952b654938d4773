package actor_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The actor is a pure state machine: what it decides is a function of the
// transaction it is given (data.Tx, its one port to the index) and of the
// message. These tests keep it so: no file or network I/O, no transport
// packages, and of data only what works inside a transaction, never what
// opens, moves or migrates index files (that is the store owner's, queue).

// forbiddenDeps are packages the actor must not reach except through data
// (which holds the bbolt index): transports, the other adapters, I/O.
var forbiddenDeps = []string{
	"net", "os/exec", "syscall", "plugin",
	"go.etcd.io/bbolt", "github.com/nats-io/", "github.com/gofiber/", "github.com/valyala/",
	"google.golang.org/api", "github.com/prometheus/",
	"github.com/bookline/bookline/queue", "github.com/bookline/bookline/httpapi",
	"github.com/bookline/bookline/calendarsync", "github.com/bookline/bookline/cmd",
}

// forbiddenImports are packages actor's own files must not import: the
// file system and the OS (fmt, archive/zip and others reach os on their
// own, which is why this is checked on the direct imports).
var forbiddenImports = []string{"os", "io/ioutil", "io/fs", "os/exec", "os/signal", "syscall", "net", "unsafe", "runtime/debug"}

// pureNet are packages under net/ that only parse: no connections.
var pureNet = []string{"net/url", "net/netip", "net/mail"}

func hasPrefix(path string, list []string) bool {
	if slices.Contains(pureNet, path) {
		return false
	}
	for _, p := range list {
		if path == p || strings.HasSuffix(p, "/") && strings.HasPrefix(path, p) || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %v: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// TestActorDependencies fails when actor (or actor/zones) depends on a
// transport, an adapter or the bbolt files other than through data.
func TestActorDependencies(t *testing.T) {
	viaData := goList(t, "-deps", "github.com/bookline/bookline/data")
	deps := goList(t, "-deps", "github.com/bookline/bookline/actor/...")
	if !slices.Contains(deps, "github.com/bookline/bookline/data") || len(deps) < 10 {
		t.Fatalf("go list -deps of actor gave %d packages without data: %v", len(deps), deps)
	}
	for _, d := range deps {
		if !slices.Contains(viaData, d) && hasPrefix(d, forbiddenDeps) {
			t.Errorf("actor depends on %s (not through data): the actor does no I/O and knows no transport", d)
		}
	}
	for _, line := range goList(t, "-f", `{{.ImportPath}}:{{join .Imports ","}}`, "github.com/bookline/bookline/actor/...") {
		pkg, imports, _ := strings.Cut(line, ":")
		for _, imp := range strings.Split(imports, ",") {
			if hasPrefix(imp, forbiddenImports) {
				t.Errorf("%s imports %s: the actor opens no files and does no I/O", pkg, imp)
			}
		}
	}
}

// TestActorOpensNoIndexFiles fails when actor's files call a function of
// data that does file I/O (found in data's source: a function that uses
// os or bbolt's Open, or calls one that does) or name data.Store: the
// actor works inside the transaction it is given.
func TestActorOpensNoIndexFiles(t *testing.T) {
	io := fileFuncs(t, "../data")
	for _, must := range []string{"Open", "OpenWith", "Migrate", "RemoveIndex", "SetAside"} {
		if !io[must] {
			t.Fatalf("the scan of data did not find that data.%s does file I/O (found %d functions): fix the scan", must, len(io))
		}
	}
	for _, f := range parseDir(t, ".") {
		local := importName(f, "github.com/bookline/bookline/data")
		if local == "" {
			continue
		}
		ast.Inspect(f.file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == local && (io[sel.Sel.Name] || sel.Sel.Name == "Store") {
				t.Errorf("%s: actor uses data.%s, which opens index files: that belongs to the store's owner (queue)",
					f.fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}

type parsedFile struct {
	fset *token.FileSet
	file *ast.File
}

// parseDir parses the non-test Go files of dir.
func parseDir(t *testing.T, dir string) []parsedFile {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []parsedFile
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, parsedFile{fset, f})
	}
	if len(out) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return out
}

// importName is the name f refers to the package path by, or "".
func importName(f parsedFile, path string) string {
	for _, imp := range f.file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return filepath.Base(path)
		}
	}
	return ""
}

// fileFuncs returns the package-level functions of the package in dir that
// do file I/O: those that use package os or call Open of bbolt, and those
// that call (by name) one that does.
func fileFuncs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	calls := map[string][]string{}
	io := map[string]bool{}
	for _, f := range parseDir(t, dir) {
		osName, boltName := importName(f, "os"), importName(f, "go.etcd.io/bbolt")
		for _, decl := range f.file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil {
				continue
			}
			name := fn.Name.Name
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && (osName != "" && x.Name == osName || boltName != "" && x.Name == boltName && n.Sel.Name == "Open") {
						io[name] = true
					}
				case *ast.CallExpr:
					if id, ok := n.Fun.(*ast.Ident); ok {
						calls[name] = append(calls[name], id.Name)
					}
				}
				return true
			})
		}
	}
	for changed := true; changed; {
		changed = false
		for fn, callees := range calls {
			if io[fn] {
				continue
			}
			for _, c := range callees {
				if io[c] {
					io[fn], changed = true, true
					break
				}
			}
		}
	}
	return io
}
