package adversarial

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// TestCheckpointCountsWhatItReadWithoutAWalk: the session's cap on the file content
// its checkpoints read (session/checkpoint) counts each step's read_bytes. A
// directory the launcher cannot list (chmod 000, one command inside) leaves the
// checkpoint no complete walk to price the tree by; the step then stages the whole
// tree, and must still count what it stored, or every checkpoint reads and stores
// a new file's content past the cap, free: 1,000 of them fill the user's disk
// through the shadow store while the repository holds one file.
func TestCheckpointCountsWhatItReadWithoutAWalk(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			script := `mkdir locked && chmod 000 locked && head -c 8388608 /dev/urandom > big && "$AB" checkpoint walkless; ` +
				`s=$?; chmod 700 locked; exit $s`
			cmd := b.Command(b.Repo, nil, script)
			cmd.Env = append(cmd.Env, "AB="+b.Bin)
			if r := sandboxtest.Run(cmd); r.Code != 0 || !strings.Contains(r.Stderr, "checkpoint: step 1 ") {
				t.Fatalf("session: %s", r)
			}
			show := sandboxtest.Run(b.Agentbox(b.Repo, "show", "--json", lastID(t, b)+"@1"))
			var st struct {
				Files struct {
					Added int `json:"added"`
				} `json:"files"`
				ReadBytes int64 `json:"read_bytes"`
			}
			if show.Code != 0 || json.Unmarshal([]byte(show.Stdout), &st) != nil {
				t.Fatalf("agentbox show --json: %s", show)
			}
			if st.Files.Added < 1 {
				t.Fatalf("the step did not record the new file: %s", show.Stdout)
			}
			if st.ReadBytes < 8<<20 {
				t.Errorf("the step stored an 8 MiB file but counts %d bytes read against the session's cap", st.ReadBytes)
			}
		})
	}
}
