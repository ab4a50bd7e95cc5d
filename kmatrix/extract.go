package kmatrix

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// KernelFiles is what a VM needs from a kernel's packages: the image and the modules
// to load, uncompressed, dependencies first.
type KernelFiles struct {
	Release string   `json:"release"` // the module directory's name, uname -r
	Vmlinuz string   `json:"vmlinuz"`
	Modules []Module `json:"modules"`
}

// Module is one extracted kernel module.
type Module struct {
	Name string `json:"name"` // "overlay"
	Path string `json:"path"` // uncompressed .ko on the host
	// Compression is how the package shipped it: "", "xz", "zst" or "gz".
	Compression string `json:"compression,omitempty"`
}

// extractKernel pulls vmlinuz and the named modules (with their dependencies, read
// from each module's .modinfo) out of the .debs into dir, reusing a previous
// extraction recorded in dir/files.json.
func extractKernel(ctx context.Context, debs []string, dir string, want []string) (KernelFiles, error) {
	record := filepath.Join(dir, "files.json")
	if b, err := os.ReadFile(record); err == nil {
		var kf KernelFiles
		if json.Unmarshal(b, &kf) == nil && filesExist(kf) && hasModules(kf, want) {
			return kf, nil
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return KernelFiles{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return KernelFiles{}, err
	}
	kf := KernelFiles{}
	got := map[string]Module{} // name → extracted
	deps := map[string][]string{}
	need := map[string]bool{}
	for _, m := range want {
		need[m] = true
	}
	// Each pass streams the packages once and takes what is needed so far; a
	// module's dependencies are only known once it is read, so loop until closed.
	for pass := 0; ; pass++ {
		missing := map[string]bool{}
		for m := range need {
			if _, ok := got[m]; !ok {
				missing[m] = true
			}
		}
		if len(missing) == 0 && (kf.Vmlinuz != "" || pass > 0) {
			break
		}
		if pass > 5 {
			return KernelFiles{}, fmt.Errorf("module dependencies do not close after %d passes: %v", pass, keys(missing))
		}
		found := 0
		for _, deb := range debs {
			err := walkDeb(ctx, deb, func(name string, r io.Reader) error {
				switch {
				case isVmlinuz(name):
					kf.Vmlinuz = filepath.Join(dir, "vmlinuz")
					return writeFrom(kf.Vmlinuz, r)
				case isModule(name):
					mod, comp := moduleName(name)
					if !missing[mod] {
						return nil
					}
					if rel := releaseOf(name); rel != "" {
						kf.Release = rel
					}
					data, err := decompress(ctx, r, comp)
					if err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					d, err := moduleDepends(data)
					if err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					p := filepath.Join(dir, mod+".ko")
					if err := os.WriteFile(p, data, 0o644); err != nil {
						return err
					}
					got[mod] = Module{Name: mod, Path: p, Compression: comp}
					deps[mod] = d
					for _, x := range d {
						need[x] = true
					}
					found++
				}
				return nil
			})
			if err != nil {
				return KernelFiles{}, fmt.Errorf("extract %s: %w", filepath.Base(deb), err)
			}
		}
		if kf.Vmlinuz == "" {
			return KernelFiles{}, fmt.Errorf("no vmlinuz in %v", baseNames(debs))
		}
		if found == 0 && len(missing) > 0 {
			return KernelFiles{}, fmt.Errorf("modules %v not found in %v", keys(missing), baseNames(debs))
		}
	}
	// Load order: dependencies first.
	seen := map[string]bool{}
	var visit func(string)
	visit = func(m string) {
		if seen[m] {
			return
		}
		seen[m] = true
		for _, d := range deps[m] {
			visit(d)
		}
		kf.Modules = append(kf.Modules, got[m])
	}
	for _, m := range want {
		visit(m)
	}
	b, _ := json.MarshalIndent(kf, "", "  ")
	return kf, writeFileAtomic(record, b)
}

// hasModules: a previous extraction holds every module wanted now.
func hasModules(kf KernelFiles, want []string) bool {
	for _, w := range want {
		if !slices.ContainsFunc(kf.Modules, func(m Module) bool { return m.Name == w }) {
			return false
		}
	}
	return true
}

func filesExist(kf KernelFiles) bool {
	if _, err := os.Stat(kf.Vmlinuz); err != nil {
		return false
	}
	for _, m := range kf.Modules {
		if _, err := os.Stat(m.Path); err != nil {
			return false
		}
	}
	return true
}

// walkDeb streams the data archive of a .deb (dpkg-deb --fsys-tarfile, which knows
// every compression dpkg uses) and calls fn for each regular file.
func walkDeb(ctx context.Context, deb string, fn func(name string, r io.Reader) error) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb: %w", err)
	}
	tr := tar.NewReader(out)
	var walkErr error
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			walkErr = err
			break
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if err := fn(strings.TrimPrefix(path.Clean("/"+h.Name), "/"), tr); err != nil {
			walkErr = err
			break
		}
	}
	_, _ = io.Copy(io.Discard, out) // let dpkg-deb finish writing
	if err := cmd.Wait(); err != nil && walkErr == nil {
		walkErr = fmt.Errorf("dpkg-deb --fsys-tarfile: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return walkErr
}

// isVmlinuz matches boot/vmlinuz-RELEASE (up to Debian 13) and
// usr/lib/modules/RELEASE/vmlinuz (the split linux-binary packages).
func isVmlinuz(name string) bool {
	return strings.HasPrefix(name, "boot/vmlinuz-") ||
		(strings.HasSuffix(name, "/vmlinuz") && strings.Contains(name, "lib/modules/"))
}

func isModule(name string) bool {
	if !strings.Contains(name, "lib/modules/") {
		return false
	}
	_, comp := moduleName(name)
	return comp != "-"
}

// moduleName returns a module's name as the kernel knows it (dashes become
// underscores) and its compression; "-" when the file is no module.
func moduleName(name string) (string, string) {
	base := path.Base(name)
	for _, c := range []struct{ ext, comp string }{{".ko", ""}, {".ko.xz", "xz"}, {".ko.zst", "zst"}, {".ko.gz", "gz"}} {
		if strings.HasSuffix(base, c.ext) {
			return strings.ReplaceAll(strings.TrimSuffix(base, c.ext), "-", "_"), c.comp
		}
	}
	return "", "-"
}

// releaseOf returns RELEASE from .../lib/modules/RELEASE/....
func releaseOf(name string) string {
	_, rest, ok := strings.Cut(name, "lib/modules/")
	if !ok {
		return ""
	}
	rel, _, _ := strings.Cut(rest, "/")
	return rel
}

// decompress reads a module. xz and zstd go through the host's tools (the standard
// library reads neither); the kernel would need CONFIG_MODULE_DECOMPRESS otherwise,
// which older kernels lack.
func decompress(ctx context.Context, r io.Reader, comp string) ([]byte, error) {
	switch comp {
	case "":
		return io.ReadAll(r)
	case "gz":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		return io.ReadAll(zr)
	case "xz", "zst":
		tool := map[string]string{"xz": "xz", "zst": "zstd"}[comp]
		cmd := exec.CommandContext(ctx, tool, "-dc")
		cmd.Stdin = r
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s -dc: %v: %s", tool, err, strings.TrimSpace(stderr.String()))
		}
		return out.Bytes(), nil
	}
	return nil, fmt.Errorf("unknown compression %q", comp)
}

// moduleDepends reads the depends= entry of a module's .modinfo section.
func moduleDepends(ko []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(ko))
	if err != nil {
		return nil, fmt.Errorf("not an ELF module: %w", err)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, errors.New("no .modinfo section")
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var out []string
			for _, d := range strings.Split(string(v), ",") {
				if d = strings.TrimSpace(d); d != "" {
					out = append(out, strings.ReplaceAll(d, "-", "_"))
				}
			}
			return out, nil
		}
	}
	return nil, nil
}

func writeFrom(p string, r io.Reader) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func baseNames(ps []string) []string {
	var out []string
	for _, p := range ps {
		out = append(out, filepath.Base(p))
	}
	return out
}
