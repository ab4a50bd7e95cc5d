package kmatrix

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// DefaultMirror is Debian's archive.
const DefaultMirror = "http://deb.debian.org/debian"

// PackageEntry is one package as a suite's Packages index describes it.
type PackageEntry struct {
	Package  string `json:"package"`
	Version  string `json:"version"`
	Filename string `json:"filename"` // relative to the mirror
	SHA256   string `json:"sha256"`
	Size     int64  `json:"size"`
	Suite    string `json:"suite"`
}

// parsePackages reads a Packages index (RFC 822-style stanzas) and returns the
// entries whose names are in want. Continuation lines are skipped: none of the
// fields used here span lines.
func parsePackages(r io.Reader, want map[string]bool) (map[string]PackageEntry, error) {
	out := map[string]PackageEntry{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var cur PackageEntry
	flush := func() {
		if cur.Package != "" && want[cur.Package] {
			out[cur.Package] = cur
		}
		cur = PackageEntry{}
	}
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Package":
			cur.Package = v
		case "Version":
			cur.Version = v
		case "Filename":
			cur.Filename = v
		case "SHA256":
			cur.SHA256 = v
		case "Size":
			cur.Size, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	flush()
	return out, sc.Err()
}

// listPackages returns the package names of an index that start with prefix, for the
// message shown when a pinned package has left the archive.
func listPackages(r io.Reader, prefix string) []string {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "Package: "); ok && strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Archive fetches packages from a Debian mirror into a cache directory. A package is
// resolved through its suite's Packages.xz (Filename, SHA256); the .deb is stored
// under its pool file name, and the resolved entry next to it as
// PACKAGE.entry.json, so that a later run with the .deb cached needs no network. A
// cached .deb is hashed again before every use.
type Archive struct {
	Mirror string // e.g. DefaultMirror
	Cache  string // e.g. /var/cache/agentbox-test/kernels
	Log    func(format string, args ...any)

	mu       sync.Mutex
	indexDir string            // temporary, for this run's indexes
	indexes  map[string]string // suite → path of the decompressed index
}

// Close removes the indexes read during this run; they are stale by the next.
func (a *Archive) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.indexes = nil
	if a.indexDir == "" {
		return nil
	}
	err := os.RemoveAll(a.indexDir)
	a.indexDir = ""
	return err
}

func (a *Archive) logf(format string, args ...any) {
	if a.Log != nil {
		a.Log(format, args...)
	}
}

// Fetch returns the path of the verified .deb of package pkg from suite.
func (a *Archive) Fetch(ctx context.Context, suite, pkg string) (string, PackageEntry, error) {
	if err := os.MkdirAll(a.Cache, 0o755); err != nil {
		return "", PackageEntry{}, fmt.Errorf("kernel cache: %w", err)
	}
	entryPath := filepath.Join(a.Cache, pkg+".entry.json")
	if e, err := readEntry(entryPath); err == nil && e.Suite == suite {
		deb := filepath.Join(a.Cache, path.Base(e.Filename))
		if err := checkSHA256(deb, e.SHA256); err == nil {
			return deb, e, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			a.logf("cached %s: %v; fetching again", path.Base(deb), err)
		}
	}
	e, err := a.resolve(ctx, suite, pkg)
	if err != nil {
		return "", PackageEntry{}, err
	}
	deb := filepath.Join(a.Cache, path.Base(e.Filename))
	if err := checkSHA256(deb, e.SHA256); err != nil {
		a.logf("downloading %s (%d MB)", e.Filename, e.Size>>20)
		if err := download(ctx, a.Mirror+"/"+e.Filename, deb, e.SHA256); err != nil {
			return "", PackageEntry{}, err
		}
	}
	b, _ := json.MarshalIndent(e, "", "  ")
	if err := writeFileAtomic(entryPath, b); err != nil {
		return "", PackageEntry{}, err
	}
	return deb, e, nil
}

func readEntry(p string) (PackageEntry, error) {
	var e PackageEntry
	b, err := os.ReadFile(p)
	if err != nil {
		return e, err
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("%s: %w", p, err)
	}
	if e.Filename == "" || len(e.SHA256) != 64 {
		return e, fmt.Errorf("%s: incomplete entry", p)
	}
	return e, nil
}

// resolve finds pkg in suite's index, downloading the index once per run.
func (a *Archive) resolve(ctx context.Context, suite, pkg string) (PackageEntry, error) {
	idx, err := a.index(ctx, suite)
	if err != nil {
		return PackageEntry{}, err
	}
	f, err := os.Open(idx)
	if err != nil {
		return PackageEntry{}, err
	}
	defer f.Close()
	found, err := parsePackages(f, map[string]bool{pkg: true})
	if err != nil {
		return PackageEntry{}, fmt.Errorf("%s Packages index: %w", suite, err)
	}
	e, ok := found[pkg]
	if !ok {
		_, _ = f.Seek(0, io.SeekStart)
		prefix, _, _ := strings.Cut(pkg, ".")
		cands := listPackages(f, strings.TrimRight(prefix, "0123456789"))
		return PackageEntry{}, fmt.Errorf("package %s is no longer in %s's index (the pinned list needs an update); candidates: %s",
			pkg, suite, strings.Join(cands, " "))
	}
	if e.Filename == "" || len(e.SHA256) != 64 {
		return PackageEntry{}, fmt.Errorf("%s in %s's index: no Filename or SHA256", pkg, suite)
	}
	e.Suite = suite
	return e, nil
}

func (a *Archive) index(ctx context.Context, suite string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.indexes[suite]; ok {
		return p, nil
	}
	url := fmt.Sprintf("%s/dists/%s/main/binary-amd64/Packages.xz", a.Mirror, suite)
	a.logf("reading %s", url)
	if a.indexDir == "" {
		dir, err := os.MkdirTemp("", "kmatrix-index-")
		if err != nil {
			return "", err
		}
		a.indexDir = dir
	}
	xzPath := filepath.Join(a.indexDir, "Packages-"+suite+".xz")
	if err := download(ctx, url, xzPath, ""); err != nil {
		return "", err
	}
	plain := strings.TrimSuffix(xzPath, ".xz")
	if err := xzDecompressFile(ctx, xzPath, plain); err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	_ = os.Remove(xzPath)
	if a.indexes == nil {
		a.indexes = map[string]string{}
	}
	a.indexes[suite] = plain
	return plain, nil
}

// download fetches url into dst through a temporary file; with a non-empty
// sha256hex it refuses content with another hash.
func download(ctx context.Context, url, dst, sha256hex string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("download %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download %s: %s", url, resp.Status)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), resp.Body); err != nil {
		tmp.Close()
		return fmt.Errorf("download %s: %w", url, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); sha256hex != "" && got != sha256hex {
		return fmt.Errorf("download %s: sha256 %s, the index says %s (refusing it)", url, got, sha256hex)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

func checkSHA256(p, want string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("sha256 %s, want %s", got, want)
	}
	return nil
}

func writeFileAtomic(p string, data []byte) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// xzDecompressFile runs the host's xz: Go's standard library has no xz reader.
func xzDecompressFile(ctx context.Context, src, dst string) error {
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "xz", "-dc", src)
	cmd.Stdout = out
	var stderr strings.Builder
	cmd.Stderr = &stderr
	runErr := cmd.Run()
	if err := out.Close(); err != nil && runErr == nil {
		runErr = err
	}
	if runErr != nil {
		return fmt.Errorf("xz -dc %s: %v: %s", src, runErr, strings.TrimSpace(stderr.String()))
	}
	return nil
}
