package config

import (
	"errors"
	"strings"
	"testing"
)

// TestParseRefusesCostlyShapes: a repository's file nested or dotted past
// tomlbound's bound is refused before it is decoded (decoding 64 KiB of it took
// two minutes), naming the file.
func TestParseRefusesCostlyShapes(t *testing.T) {
	for name, doc := range map[string]string{
		"inline tables": "x = " + strings.Repeat("{b=", 4000) + "1" + strings.Repeat("}", 4000) + "\n",
		"dotted key":    strings.Repeat("a.", 8000) + "a = 1\n",
		"table header":  "[" + strings.Repeat("a.", 8000) + "a]\n",
	} {
		_, err := Parse("/r/.agentbox.toml", []byte(doc))
		var ce *Error
		if !errors.As(err, &ce) || ce.File != "/r/.agentbox.toml" || !strings.Contains(err.Error(), "not a policy file") {
			t.Errorf("%s: Parse = %v, want a refusal naming the file", name, err)
		}
	}
}
