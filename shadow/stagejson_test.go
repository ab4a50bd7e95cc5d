package shadow

import (
	"encoding/json"
	"testing"

	"github.com/agentbox/agentbox/internal/fixedjson/fixedjsontest"
)

// TestReadStageFastTakesWhatWriteStageWrites: every escape-free state writeStage's
// encoding (json.Marshal) writes is read by the fast path into json.Unmarshal's value.
func TestReadStageFastTakesWhatWriteStageWrites(t *testing.T) {
	fixedjsontest.CheckReadsWritten(t, 3, func(st *stageState) ([]byte, error) { return json.Marshal(st) }, readStageFast)
}

func FuzzReadStageFast(f *testing.F) {
	f.Add([]byte(`{"clock":{"Real":1,"Boot":2,"BootID":"b"},"added":{"Real":0,"Boot":0},"fine":true,"tree":"abc","index":{"Ino":1,"Size":2,"MtimeNS":3,"CtimeNS":4},"recent":[{"path":"a","ctime":1,"ino":2,"mode":33188,"size":3,"oid":"x"}]}`))
	f.Add([]byte(`{"clock":{"real":1},"tree":"a\u0062","recent":[]}`))
	f.Add([]byte(`{"recent":[{"ino":-1}],"index":{"Ino":1.5}}`))
	f.Fuzz(func(t *testing.T, b []byte) { fixedjsontest.CheckAgainstJSON(t, b, readStageFast) })
}
