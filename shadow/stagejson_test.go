package shadow

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/agentbox/agentbox/internal/fixedjson/fixedjsontest"
)

// TestReadStageFastTakesWhatWriteStageWrites: every state writeStage's encoding
// writes, with random and with every field set, is read by the fast path into the
// value json.Unmarshal reads, unless a string needed an escape (a field added to
// stageState and not to the reader fails here: the fast path refuses the unknown
// name).
func TestReadStageFastTakesWhatWriteStageWrites(t *testing.T) {
	rnd := rand.New(rand.NewPCG(36, 3))
	taken := 0
	for i := range 2000 {
		var st stageState
		if i%2 == 0 {
			fixedjsontest.FillPlain(&st, rnd, i%4 == 0)
		} else {
			fixedjsontest.Fill(&st, rnd, i%3 == 0)
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := readStageFast(b)
		if !ok {
			if !bytes.Contains(b, []byte{'\\'}) {
				t.Fatalf("state %d: the fast path refused %s", i, b)
			}
			continue
		}
		taken++
		var want stageState
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("state %d: fast path read %+v, encoding/json %+v", i, got, want)
		}
	}
	if taken < 1000 {
		t.Errorf("the fast path took %d of 2000 states, want every plain one", taken)
	}
}

func FuzzReadStageFast(f *testing.F) {
	f.Add([]byte(`{"clock":{"Real":1,"Boot":2},"added":{"Real":0,"Boot":0},"fine":true,"tree":"abc","index":{"Ino":1,"Size":2,"MtimeNS":3,"CtimeNS":4},"recent":[{"path":"a","ctime":1,"ino":2,"mode":33188,"size":3,"oid":"x"}]}`))
	f.Add([]byte(`{"clock":{"real":1},"tree":"a\u0062","recent":[]}`))
	f.Add([]byte(`{"recent":[{"ino":-1}],"index":{"Ino":1.5}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := readStageFast(b)
		if !ok {
			return
		}
		var want stageState
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("fast path took %q, encoding/json refuses it: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fast path read %+v, encoding/json %+v", b, got, want)
		}
	})
}
