package adversarial

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// TestNoFileLeases: the command cannot take a file lease. A write lease on a file of
// the repository (.git/HEAD here) made every other opener wait 45 s per file while
// the session ran — another session's launch, which then refused (its snapshot opens
// with O_NONBLOCK), and the operator's own git status — and a read lease does the
// same to writers. Both fail with EPERM on every backend.
func TestNoFileLeases(t *testing.T) {
	const script = `for kind in F_WRLCK F_RDLCK; do
	perl -MFcntl -e 'open(my $f, "<", ".git/HEAD") or die "open: $!\n";
		if (fcntl($f, 1024, eval $ARGV[0])) { print "LEASED $ARGV[0]\n" } else { print "refused $ARGV[0]: $!\n" }' "$kind"
done`
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			r := sandboxtest.Run(b.Command(b.Repo, []string{"--no-record"}, script))
			if r.Code != 0 || strings.Contains(r.Stdout, "LEASED") || strings.Count(r.Stdout, "Operation not permitted") != 2 {
				t.Errorf("a file lease was taken, or not refused with EPERM: %s", r)
			}
		})
	}
}
