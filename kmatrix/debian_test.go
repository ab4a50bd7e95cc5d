package kmatrix

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// mirror serves a suite's Packages.xz listing one package and that package's file.
func mirror(t *testing.T, deb []byte, indexSHA string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	if _, err := exec.LookPath("xz"); err != nil {
		testenv.Skip(t, "needs xz (scripts/setup-test-env.sh installs it)")
	}
	index := "Package: linux-image-9.9.9-amd64\nVersion: 9.9.9-1\nFilename: pool/main/l/linux/linux-image-9.9.9-amd64_9.9.9-1_amd64.deb\n" +
		"Size: " + strconv.Itoa(len(deb)) + "\nSHA256: " + indexSHA + "\n\n"
	cmd := exec.Command("xz", "-c")
	cmd.Stdin = strings.NewReader(index)
	xzIndex, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/dists/trixie/main/binary-amd64/Packages.xz":
			w.Write(xzIndex)
		case "/pool/main/l/linux/linux-image-9.9.9-amd64_9.9.9-1_amd64.deb":
			w.Write(deb)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestArchiveFetchVerifiesAndCaches(t *testing.T) {
	deb := []byte("a kernel package")
	sum := sha256.Sum256(deb)
	srv, hits := mirror(t, deb, hex.EncodeToString(sum[:]))
	a := &Archive{Mirror: srv.URL, Cache: t.TempDir()}
	defer a.Close()
	path, e, err := a.Fetch(context.Background(), "trixie", "linux-image-9.9.9-amd64")
	if err != nil {
		t.Fatal(err)
	}
	if e.Version != "9.9.9-1" || !strings.HasSuffix(path, "linux-image-9.9.9-amd64_9.9.9-1_amd64.deb") {
		t.Errorf("entry %+v at %s", e, path)
	}
	// A new Archive on the same cache needs no network at all.
	srv.Close()
	before := hits.Load()
	b := &Archive{Mirror: srv.URL, Cache: a.Cache}
	if _, _, err := b.Fetch(context.Background(), "trixie", "linux-image-9.9.9-amd64"); err != nil {
		t.Fatalf("cached fetch: %v", err)
	}
	if hits.Load() != before {
		t.Error("cached fetch went to the mirror")
	}
}

func TestArchiveFetchRefusesWrongHash(t *testing.T) {
	srv, _ := mirror(t, []byte("tampered"), strings.Repeat("ab", 32))
	a := &Archive{Mirror: srv.URL, Cache: t.TempDir()}
	defer a.Close()
	_, _, err := a.Fetch(context.Background(), "trixie", "linux-image-9.9.9-amd64")
	if err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("err = %v, want a refusal of the wrong hash", err)
	}
}

func TestArchiveFetchNamesCandidates(t *testing.T) {
	srv, _ := mirror(t, []byte("x"), strings.Repeat("ab", 32))
	a := &Archive{Mirror: srv.URL, Cache: t.TempDir()}
	defer a.Close()
	_, _, err := a.Fetch(context.Background(), "trixie", "linux-image-9.9.8-amd64")
	if err == nil || !strings.Contains(err.Error(), "linux-image-9.9.9-amd64") || !bytes.Contains([]byte(err.Error()), []byte("pinned list")) {
		t.Fatalf("err = %v, want the candidates that replaced the pin", err)
	}
}
