package snapshot

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/agentbox/agentbox/internal/fixedjson/fixedjsontest"
)

// TestReadRecordFastTakesWhatPublishWrites: every record publishRecord's encoding
// writes, with random and with every field set, is read by the fast path into the
// value json.Unmarshal reads, unless a string needed an escape (a field added to
// Record or Manifest and not to the reader fails here: the fast path refuses the
// unknown name).
func TestReadRecordFastTakesWhatPublishWrites(t *testing.T) {
	rnd := rand.New(rand.NewPCG(36, 4))
	taken := 0
	for i := range 2000 {
		var rec Record
		if i%2 == 0 {
			fixedjsontest.FillPlain(&rec, rnd, i%4 == 0)
		} else {
			fixedjsontest.Fill(&rec, rnd, i%3 == 0)
		}
		b, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got, ok := readRecordFast(append(b, '\n'))
		if !ok {
			if !bytes.Contains(b, []byte{'\\'}) {
				t.Fatalf("record %d: the fast path refused %s", i, b)
			}
			continue
		}
		taken++
		var want Record
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("record %d: fast path read %+v, encoding/json %+v", i, got, want)
		}
	}
	if taken < 1000 {
		t.Errorf("the fast path took %d of 2000 records, want every plain one", taken)
	}
}

func FuzzReadRecordFast(f *testing.F) {
	f.Add([]byte(`{"store_format":2,"manifest":{"format":1,"repo":"/r","git_common_dir":"/r/.git","git_dir":"/r/.git","head":"ref: refs/heads/main","time":"2026-12-07T07:00:00Z","agentbox_version":"dev"},"common":"ab","bytes":1,"new_bytes":0,"entries":3,"skipped":[]}`))
	f.Add([]byte(`{"Store_Format":2,"manifest":{"time":null}}`))
	f.Add([]byte(`{"dotgit_mode":-1,"common_mtime":1e3,"skipped":["a\nb"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := readRecordFast(b)
		if !ok {
			return
		}
		var want Record
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("fast path took %q, encoding/json refuses it: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fast path read %+v, encoding/json %+v", b, got, want)
		}
	})
}
