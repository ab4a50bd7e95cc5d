package snapshot

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzReadManifest feeds arbitrary bytes to the manifest reader restore uses (the seed
// corpus in testdata/fuzz holds manifests and the start of an old ZIP snapshot). It
// may not panic, and whatever it accepts must survive a round trip unchanged.
func FuzzReadManifest(f *testing.F) {
	f.Add([]byte(validManifestJSON(f)))
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`PK\x03\x04`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ReadManifest(bytes.NewReader(data))
		if err != nil {
			return
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("marshal accepted manifest: %v", err)
		}
		again, err := ReadManifest(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("accepted manifest %+v does not read back: %v", m, err)
		}
		if !sameManifest(*m, *again) {
			t.Fatalf("round trip changed %+v into %+v", m, again)
		}
	})
}

func TestReadManifestRejects(t *testing.T) {
	good := validManifestJSON(t)
	for name, in := range map[string]string{
		"not JSON":          "nope",
		"future format":     strings.Replace(good, `"format":1`, `"format":2`, 1),
		"relative repo":     strings.Replace(good, `"repo":"/src/proj"`, `"repo":"src/proj"`, 1),
		"unclean git dir":   strings.Replace(good, `"git_dir":"/src/proj/.git"`, `"git_dir":"/src/proj/../x"`, 1),
		"NUL in repo":       strings.Replace(good, `"repo":"/src/proj"`, `"repo":"/src/\u0000"`, 1),
		"no time":           strings.Replace(good, `"time":"2026-01-01T00:00:00Z"`, `"time":"0001-01-01T00:00:00Z"`, 1),
		"bad head commit":   strings.Replace(good, `"head":`, `"head_commit":"xyz","head":`, 1),
		"newline in head":   strings.Replace(good, `"head":"ref: refs/heads/main"`, `"head":"a\nb"`, 1),
		"larger than 64KiB": good[:len(good)-1] + `,"pad":"` + strings.Repeat("x", 70000) + `"}`,
	} {
		if in == good {
			t.Fatalf("%s: the replacement did not apply", name)
		}
		if _, err := ReadManifest(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ReadManifest(strings.NewReader(good)); err != nil {
		t.Errorf("valid manifest refused: %v", err)
	}
}
