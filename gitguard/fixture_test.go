package gitguard

import (
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/gitfixture"
)

// fixture is gitfixture's repository, for the protected-path tests.
type fixture struct{ *gitfixture.Fixture }

func newFixture(t *testing.T) *fixture { return &fixture{gitfixture.New(t)} }
