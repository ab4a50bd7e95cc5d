package shadow

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/agentbox/agentbox/internal/fixedjson/fixedjsontest"
)

// TestReadStageFastTakesWhatWriteStageWrites: every escape-free state writeStage's
// encoding (marshalStage) writes is read by the fast path into json.Unmarshal's value.
func TestReadStageFastTakesWhatWriteStageWrites(t *testing.T) {
	fixedjsontest.CheckReadsWritten(t, 3, func(st *stageState) ([]byte, error) { return marshalStage(st), nil }, readStageFast)
}

// TestMarshalStageAsJSON: the hand-written encoder writes the bytes json.Encoder
// writes with HTML escaping off, on states with random fields and with every field
// set (a field added to stageState and not to marshalStage fails here), and
// unmarshalStage reads back the state written, escapes or not.
func TestMarshalStageAsJSON(t *testing.T) {
	rnd := rand.New(rand.NewPCG(36, 5))
	for i := range 2000 {
		var st stageState
		fixedjsontest.Fill(&st, rnd, i%4 == 0)
		got := marshalStage(&st)
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(&st); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, bytes.TrimSuffix(want.Bytes(), []byte{'\n'})) {
			t.Fatalf("state %d differs from encoding/json's:\n%s\nwant\n%s", i, got, want.Bytes())
		}
		var back stageState
		if err := unmarshalStage(got, &back); err != nil {
			t.Fatalf("state %d: %s read back: %v", i, got, err)
		}
		var ref stageState
		if err := json.Unmarshal(got, &ref); err != nil || !reflect.DeepEqual(back, ref) {
			t.Fatalf("state %d: read back %+v, encoding/json %+v (%v)", i, back, ref, err)
		}
	}
	var zero stageState
	if got, want := marshalStage(&zero), must2(json.Marshal(&zero)); !bytes.Equal(got, want) {
		t.Errorf("the zero state: %s, want %s", got, want)
	}
}

func must2(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func FuzzReadStageFast(f *testing.F) {
	f.Add([]byte(`{"clock":{"Real":1,"Boot":2,"BootID":"b"},"added":{"Real":0,"Boot":0},"fine":true,"tree":"abc","index":{"Ino":1,"Size":2,"MtimeNS":3,"CtimeNS":4},"recent":[{"path":"a","ctime":1,"ino":2,"mode":33188,"size":3,"oid":"x"}]}`))
	f.Add([]byte(`{"clock":{"real":1},"tree":"a\u0062","recent":[]}`))
	f.Add([]byte(`{"recent":[{"ino":-1}],"index":{"Ino":1.5}}`))
	f.Fuzz(func(t *testing.T, b []byte) { fixedjsontest.CheckAgainstJSON(t, b, readStageFast) })
}
