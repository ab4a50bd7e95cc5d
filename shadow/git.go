package shadow

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/hostpath"
)

// hardening are the -c options given to every Git command. Git reads no configuration
// but the shadow repository's own (see gitEnv), so these only pin down what Git would
// otherwise take from built-in defaults or the environment; each one closes a way in
// which a file in the repository could make Git run a program or rewrite content.
var hardening = []string{
	"-c", "core.hooksPath=/dev/null", // no hooks (reference-transaction, post-index-change …)
	"-c", "core.fsmonitor=false", // no fsmonitor program
	"-c", "core.attributesFile=/dev/null", // no user-level attributes
	"-c", "core.excludesFile=/dev/null", // only the repository's .gitignore files decide
	"-c", "core.pager=cat",
	"-c", "core.autocrlf=false", // byte-exact content, whatever .gitattributes says
	"-c", "core.safecrlf=false",
	"-c", "core.symlinks=true", // symlinks stay symlinks, never followed
	// The stat cache must see every change: the sandbox can set a file's mtime back,
	// but not its ctime, so the ctime is compared too.
	"-c", "core.trustctime=true",
	"-c", "core.checkStat=default",
	"-c", "core.splitIndex=false",
	"-c", "core.quotePath=true", // hostile file names print quoted on one line
	"-c", "gc.auto=0", // no background gc (and no pre-auto-gc hook)
	"-c", "maintenance.auto=false",
	"-c", "color.ui=never",
	"--no-pager",
	"--no-replace-objects",
	"--literal-pathspecs",
}

// infoAttributes is written to the shadow repository's info/attributes, which Git
// ranks above every .gitattributes in the working tree. It unsets, for every path,
// each attribute through which a .gitattributes file in the repository could run a
// program (filter, diff and merge drivers) or change the bytes recorded (text, eol,
// ident, working-tree-encoding). No driver is configured anyway, since Git reads no
// configuration but the shadow's own; this makes the intent explicit and keeps it
// true if a driver ever is.
const infoAttributes = `# Written by agentbox: the recorded content is the bytes on disk, and no
# attribute from the repository can select a program.
* !filter !diff !merge !ident !working-tree-encoding !eol -text
`

// git runs Git against one shadow repository. Every invocation is hardened: its
// environment is built from nothing, so no GIT_* variable of the caller reaches it;
// GIT_DIR is the shadow repository, so the recorded repository's .git (config, hooks,
// info/, its own attributes) is never read; system, global and XDG configuration are
// off.
type git struct {
	bin      string // absolute path of the git binary, outside the repository
	gitDir   string // the shadow repository
	workTree string // the recorded repository; "" for commands that need no work tree
	// deadline, when it points at a non-zero time, is when every command is
	// stopped (recordDeadline); it is the store's, shared by its copies of git.
	deadline *time.Time
}

// findGit returns the git the collector runs: hostpath.LookPath's, which skips
// every PATH entry the sandbox could have written (the repository above all).
func findGit(repo string) (string, error) {
	return hostpath.LookPath("git", repo)
}

// env is the complete environment of a Git command.
func (g *git) env() []string {
	env := []string{
		"GIT_DIR=" + g.gitDir,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_NO_REPLACE_OBJECTS=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_PAGER=cat",
		"PAGER=cat",
		"GIT_AUTHOR_NAME=agentbox",
		"GIT_AUTHOR_EMAIL=agentbox@localhost",
		"GIT_COMMITTER_NAME=agentbox",
		"GIT_COMMITTER_EMAIL=agentbox@localhost",
		// HOME and XDG_CONFIG_HOME point into the shadow repository, where no
		// .gitconfig or git/ directory exists, so nothing user-level is read either.
		"HOME=" + g.gitDir,
		"XDG_CONFIG_HOME=" + filepath.Join(g.gitDir, "no-xdg-config"),
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"LC_ALL=C",
	}
	if g.workTree != "" {
		// No other Git runs from a command that reads the working tree (bounds.go).
		env = append(env, "GIT_WORK_TREE="+g.workTree, "GIT_EXEC_PATH="+filepath.Join(g.gitDir, noExecDir))
	}
	// Without GIT_WORK_TREE the shadow repository (core.bare=true) has no work tree,
	// and Git looks at nothing outside it.
	return env
}

// cmd builds the command without running it. Its working directory is the work tree
// when there is one (so a vanished repository fails here, with a clear error), else
// the shadow repository.
func (g *git) cmd(args ...string) *exec.Cmd {
	h := hardening
	if len(args) > 0 && args[0] == "check-ignore" {
		// It refuses pathspec magic, and takes each path it is given as one path.
		h = slices.DeleteFunc(slices.Clone(h), func(a string) bool { return a == "--literal-pathspecs" })
	}
	c := exec.Command(g.bin, append(append([]string(nil), h...), args...)...)
	c.Env = g.env()
	c.Dir = g.gitDir
	if g.workTree != "" {
		c.Dir = g.workTree
	}
	return c
}

// gitError is a failed Git command with what it printed on stderr.
type gitError struct {
	args   []string
	err    error
	stderr string
}

func (e *gitError) Error() string {
	msg := strings.TrimSpace(e.stderr)
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:] // the last line says why ("fatal: …")
	}
	if msg == "" {
		msg = e.err.Error()
	}
	return fmt.Sprintf("git %s: %s", e.args[0], msg)
}

func (e *gitError) Unwrap() error { return e.err }

// run runs git with stdin (may be nil) and returns its stdout.
func (g *git) run(stdin io.Reader, args ...string) ([]byte, error) {
	return g.runEnv(nil, stdin, args...)
}

// runEnv is run with extra environment variables.
func (g *git) runEnv(env []string, stdin io.Reader, args ...string) ([]byte, error) {
	stdout, _, err := g.run3(env, stdin, args...)
	return stdout, err
}

// run3 is runEnv that also returns stderr, for commands that warn on success.
func (g *git) run3(env []string, stdin io.Reader, args ...string) (stdout, stderr []byte, err error) {
	var o, e bytes.Buffer
	c := g.cmd(args...)
	c.Env = append(c.Env, env...)
	c.Stdin, c.Stdout, c.Stderr = stdin, &o, &e
	if err := g.runBounded(c, args); err != nil {
		var be *BoundError
		if errors.As(err, &be) {
			return o.Bytes(), e.Bytes(), be
		}
		return o.Bytes(), e.Bytes(), &gitError{args: args, err: err, stderr: e.String()}
	}
	return o.Bytes(), e.Bytes(), nil
}

// out runs git and returns its stdout without the trailing newline.
func (g *git) out(args ...string) (string, error) {
	b, err := g.run(nil, args...)
	return strings.TrimRight(string(b), "\n"), err
}

// stream runs git with its stdout going to w.
func (g *git) stream(w io.Writer, args ...string) error {
	var stderr bytes.Buffer
	c := g.cmd(args...)
	c.Stdout, c.Stderr = w, &stderr
	if err := g.runBounded(c, args); err != nil {
		return &gitError{args: args, err: err, stderr: stderr.String()}
	}
	return nil
}
