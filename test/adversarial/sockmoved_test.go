package adversarial

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The socket table names a socket by the path it was bound at; the file that bind
// made may have another name since. A daemon that binds a temporary name and
// renames it into place, or gives its socket a second name, is listed where it no
// longer is, or not only there.
var movedSocketAttacks = []attack{
	{name: "host daemon socket renamed after its bind", setup: movedDaemonSocket("rename"), script: `
		try renamed-daemon-socket sh -c 'socat -u UNIX-CONNECT:"$MSOCK" - | grep -q agentbox-host'
		echo DONE`},
	{name: "host daemon socket with a second name", setup: movedDaemonSocket("link"), script: `
		try linked-daemon-socket sh -c 'socat -u UNIX-CONNECT:"$MSOCK" - | grep -q agentbox-host'
		echo DONE`},
}

// A second name in another directory cannot be found: the launch is refused, and
// so is every other launch on the machine while the row runs (TestHostSocketCrowds).
var movedSocketElsewhere = []attack{
	{name: "host daemon socket with a second name elsewhere", setup: movedDaemonSocket("elsewhere"), script: `
		try elsewhere-daemon-socket sh -c 'socat -u UNIX-CONNECT:"$MSOCK" - | grep -q agentbox-host'
		echo DONE`, refused: refusedWithoutLandlock("host sockets:")},
}

func init() {
	attacks = append(attacks, movedSocketAttacks...)
	socketCrowdAttacks = append(socketCrowdAttacks, movedSocketElsewhere...)
}

// movedDaemonSocket listens on an answering socket below the outside directory
// and then renames it ("rename") or links a second name to it in its directory
// ("link") or in another ("elsewhere"); $MSOCK is the name the bind did not make.
func movedDaemonSocket(how string) func(t *testing.T, x *target) []string {
	return func(t *testing.T, x *target) []string {
		dir := filepath.Join(x.Outside, "d-"+how)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bound := filepath.Join(dir, "tmp.sock")
		testenv.ServeUnix(t, bound, "agentbox-host")
		other := filepath.Join(dir, "real.sock")
		var err error
		switch how {
		case "rename":
			err = os.Rename(bound, other)
		case "link":
			err = os.Link(bound, other)
		case "elsewhere":
			other = filepath.Join(x.Outside, "real.sock")
			err = os.Link(bound, other)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(other) })
		x.env = append(x.env, "MSOCK="+other)
		return nil
	}
}
