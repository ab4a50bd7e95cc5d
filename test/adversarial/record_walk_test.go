package adversarial

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandboxtest"
)

// TestRecordWalkSeesOldContentMovedIn: the record of a session is taken from the
// audit's walk (shadow/changed.go): what changed is what has a ctime since the last
// record. The session brings old content under tracked names without a single new
// ctime on it: a directory renamed over a tracked one of the same name, and a
// .gitignore that ignored itself removed (what it ignored is old). Each session's
// `agentbox diff --stat` must still name what changed.
func TestRecordWalkSeesOldContentMovedIn(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			// The sleep ages what the first session made past the recorder's slack.
			steps := []struct{ script, want string }{
				{"mkdir -p d/x other/y self && echo A > d/x/file && echo B > other/y/file && " +
					"printf '.gitignore\\nhidden.txt\\n' > self/.gitignore && echo h > self/hidden.txt && " +
					"echo k > self/keep.txt && sleep 0.3", "d/x/file"},
				{"rm -rf d/x && mv other/y d/x", "d/x/file"},
				{"rm self/.gitignore", "self/hidden.txt"},
			}
			for _, st := range steps {
				if r := runBounded(t, b, st.script); r.Code != 0 {
					t.Fatalf("%s: %s", st.script, r)
				}
				log := sandboxtest.Run(b.Agentbox(b.Repo, "log"))
				lines := strings.Split(strings.TrimSpace(log.Stdout), "\n")
				if log.Code != 0 || len(lines) < 2 {
					t.Fatalf("agentbox log: %s", log)
				}
				id := strings.Fields(lines[1])[0]
				diff := sandboxtest.Run(b.Agentbox(b.Repo, "diff", "--stat", id))
				if diff.Code != 0 || !strings.Contains(diff.Stdout, st.want) {
					t.Errorf("after %q the record does not name %s: %s", st.script, st.want, diff)
				}
			}
		})
	}
}
