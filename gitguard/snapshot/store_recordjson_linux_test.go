package snapshot

import (
	"encoding/json"
	"testing"

	"github.com/agentbox/agentbox/internal/fixedjson/fixedjsontest"
)

// TestReadRecordFastTakesWhatPublishWrites: every escape-free record publishRecord's
// encoding (json.MarshalIndent and a newline) writes is read by the fast path into
// json.Unmarshal's value.
func TestReadRecordFastTakesWhatPublishWrites(t *testing.T) {
	fixedjsontest.CheckReadsWritten(t, 4, func(rec *Record) ([]byte, error) {
		b, err := json.MarshalIndent(rec, "", "  ")
		return append(b, '\n'), err
	}, readRecordFast)
}

func FuzzReadRecordFast(f *testing.F) {
	f.Add([]byte(`{"store_format":2,"manifest":{"format":1,"repo":"/r","git_common_dir":"/r/.git","git_dir":"/r/.git","head":"ref: refs/heads/main","time":"2026-12-07T07:00:00Z","agentbox_version":"dev"},"common":"ab","bytes":1,"new_bytes":0,"entries":3,"skipped":[]}`))
	f.Add([]byte(`{"Store_Format":2,"manifest":{"time":null}}`))
	f.Add([]byte(`{"dotgit_mode":-1,"common_mtime":1e3,"skipped":["a\nb"]}`))
	f.Fuzz(func(t *testing.T, b []byte) { fixedjsontest.CheckAgainstJSON(t, b, readRecordFast) })
}
