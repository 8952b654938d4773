// Command sizes checks the size limits of bookline's Go code: no non-test
// file over -max-lines lines, no function (or method, or function literal
// at package level) over -max-func lines unless the comment above it has a
// line starting with "long:" that says why. It prints every file and
// function over a limit, longest first, and exits 1 if there is one.
//
//	go run ./.ci/sizes            # from the repository's root
//	go run ./.ci/sizes -list      # every function over the limit, "long:" or not
//
// Test files (_test.go) are exempt: a table of cases is long on purpose.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

type finding struct {
	pos   string
	what  string
	lines int
	why   string // the long: reason, when given
}

func main() {
	maxLines := flag.Int("max-lines", 600, "longest non-test file, in lines")
	maxFunc := flag.Int("max-func", 100, "longest function, in lines, without a long: comment")
	list := flag.Bool("list", false, "also list the long functions that say why (long:), without failing on them")
	root := flag.String("root", ".", "repository root")
	flag.Parse()

	var files, funcs, excused []finding
	fset := token.NewFileSet()
	err := filepath.WalkDir(*root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != *root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, _ := filepath.Rel(*root, path)
		if n := fset.Position(f.End()).Line; n > *maxLines {
			files = append(files, finding{pos: rel, what: "file", lines: n})
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			n := end.Line - start.Line + 1
			if n <= *maxFunc {
				continue
			}
			fn := finding{pos: fmt.Sprintf("%s:%d", rel, start.Line), what: funcName(fd), lines: n, why: longReason(fd.Doc)}
			if fn.why != "" {
				excused = append(excused, fn)
			} else {
				funcs = append(funcs, fn)
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "sizes:", err)
		os.Exit(2)
	}
	longest := func(a, b finding) int { return b.lines - a.lines }
	slices.SortStableFunc(files, longest)
	slices.SortStableFunc(funcs, longest)
	slices.SortStableFunc(excused, longest)
	for _, f := range files {
		fmt.Printf("%s: %d lines (limit %d)\n", f.pos, f.lines, *maxLines)
	}
	for _, f := range funcs {
		fmt.Printf("%s: func %s: %d lines (limit %d; a comment line \"long: why\" above it excuses it)\n", f.pos, f.what, f.lines, *maxFunc)
	}
	if *list {
		for _, f := range excused {
			fmt.Printf("%s: func %s: %d lines, long: %s\n", f.pos, f.what, f.lines, f.why)
		}
	}
	if len(files)+len(funcs) > 0 {
		fmt.Printf("%d files over %d lines, %d functions over %d lines without a long: comment\n", len(files), *maxLines, len(funcs), *maxFunc)
		os.Exit(1)
	}
}

// funcName is Recv.Name for a method, Name otherwise.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// longReason is the text after "long:" in the doc comment, or "".
func longReason(doc *ast.CommentGroup) string {
	if doc == nil {
		return ""
	}
	for _, line := range strings.Split(doc.Text(), "\n") {
		if why, ok := strings.CutPrefix(strings.TrimSpace(line), "long:"); ok && strings.TrimSpace(why) != "" {
			return strings.TrimSpace(why)
		}
	}
	return ""
}
