package shadow

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/fixedjson/fixedjsontest"
)

// TestMarshalRecordAsJSON: the hand-written encoder writes the bytes json.Encoder
// writes, on records with random fields and on records with every field set (a
// field added to Record and not to appendRecord fails here).
func TestMarshalRecordAsJSON(t *testing.T) {
	rnd := rand.New(rand.NewPCG(36, 2))
	for i := range 2000 {
		var rec Record
		fixedjsontest.Fill(&rec, rnd, i%4 == 0)
		if _, err := appendRecord(nil, &rec); err != nil {
			t.Fatalf("record %d: the hand-written path failed: %v", i, err)
		}
		got, err := MarshalRecord(rec)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		want, err := marshalRecordReflect(rec)
		if err != nil {
			t.Fatalf("record %d: encoding/json: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("record %d differs from encoding/json's:\n%s\nwant\n%s", i, got, want)
		}
	}
	var empty Record
	got, err := MarshalRecord(empty)
	want, _ := marshalRecordReflect(empty)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("the zero record: %s, %v; want %s", got, err, want)
	}
}

// TestMarshalRecordTimeOutOfRange: a time json cannot write is the same error.
func TestMarshalRecordTimeOutOfRange(t *testing.T) {
	rec := Record{ID: "x", Start: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	_, err := MarshalRecord(rec)
	_, want := marshalRecordReflect(rec)
	if err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("MarshalRecord of the year 10000: %v, encoding/json: %v", err, want)
	}
}
