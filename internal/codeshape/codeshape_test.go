package codeshape

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The limits, for every non-test .go file of the module.
const (
	maxFileLines = 800
	maxFuncLines = 120
	maxParams    = 8 // more is a struct's worth of options passed loose
)

// exempt names what may exceed the limits, as "path" for a file or "path:Func"
// (Recv.Method for a method), with the reason.
var exempt = map[string]string{
	// The raw init's entry runs before the Go runtime may be used, as one straight
	// sequence of system calls with one error path: split, it would need calls the
	// environment cannot make.
	"nsinit/rawinit_linux_amd64.go:rawInitMain": "the raw init's straight-line entry",
}

// TestShape fails for every file and function over the limits that exempt does
// not name, and for every entry of exempt that no longer exceeds them.
func TestShape(t *testing.T) {
	root := moduleRoot(t)
	var over []string
	used := map[string]bool{}
	check := func(key string, n, limit int, what string) {
		if n <= limit {
			return
		}
		if _, ok := exempt[key]; ok {
			used[key] = true
			return
		}
		over = append(over, fmt.Sprintf("%s: %s %d (limit %d)", key, what, n, limit))
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		check(rel, fset.File(f.Pos()).LineCount(), maxFileLines, "file lines")
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			check(rel+":"+funcName(fn), n, maxFuncLines, "function lines")
			check(rel+":"+funcName(fn), params(fn.Type), maxParams, "parameters")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key := range exempt {
		if !used[key] {
			over = append(over, key+": exempt but within the limits now; remove it from exempt")
		}
	}
	sort.Strings(over)
	for _, o := range over {
		t.Error(o)
	}
}

// params counts the parameters of a function type.
func params(ft *ast.FuncType) int {
	n := 0
	for _, f := range ft.Params.List {
		n += max(1, len(f.Names))
	}
	return n
}

// funcName is fn's name, Recv.Method for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}

// moduleRoot is the directory of the module's go.mod, above this package.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// maxSessionImports bounds how many of the project's packages the session core
// imports: a feature's host glue belongs in a package of its own, behind a call the
// core makes, so that the core stays readable as the order of a launch.
const maxSessionImports = 12

// TestSessionImports fails when package session's non-test files import more of
// the project's packages than maxSessionImports.
func TestSessionImports(t *testing.T) {
	root := moduleRoot(t)
	const module = "github.com/agentbox/agentbox/"
	files, err := filepath.Glob(filepath.Join(root, "session", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			// internal/stack sizes a goroutine's stack: runtime plumbing, no
			// feature's glue.
			if path := strings.Trim(imp.Path.Value, `"`); strings.HasPrefix(path, module) && path != module+"internal/stack" {
				imports[strings.TrimPrefix(path, module)] = true
			}
		}
	}
	if len(imports) == 0 {
		t.Fatal("package session imports none of the project's packages: the test reads the wrong directory")
	}
	if len(imports) > maxSessionImports {
		var names []string
		for name := range imports {
			names = append(names, name)
		}
		sort.Strings(names)
		t.Errorf("package session imports %d of the project's packages (at most %d): %s", len(imports), maxSessionImports, strings.Join(names, ", "))
	}
}
