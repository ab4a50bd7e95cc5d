package behaviour

import (
	"os"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}
