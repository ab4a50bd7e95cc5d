package adversarial

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// TestStopLoopCostsLauncherNothing: a command with no terminal, stopped over and
// over from inside (a loop of kill -STOP against it), is continued each time — as
// it must be, since no shell could resume it. That work must not fall on the
// launcher, which runs outside the session's cgroup and so outside --cpus: the
// launcher wakes for none of the stops. The command counts its stops (by its own
// context switches); the launcher's context switches while the loop runs (every
// thread's, voluntary and not, from /proc) must stay far below that count, and its
// CPU time is logged beside the command's.
func TestStopLoopCostsLauncherNothing(t *testing.T) {
	const kills = 50000
	// Each stop and continue puts the command to sleep and wakes it: two of its
	// voluntary context switches, which it reads before and after the loop.
	script := `sw() { grep -h voluntary_ctxt_switches /proc/$$/status | head -n1 | tr -dc 0-9; }
		touch ready; while [ ! -e go ]; do sleep 0.01; done
		me=$$; before=$(sw)
		( i=0; while [ $i -lt ` + strconv.Itoa(kills) + ` ]; do kill -STOP $me; i=$((i+1)); done ) &
		wait $!
		echo $(( ($(sw) - before) / 2 )) > continues; times > cpu; touch done
		cat > /dev/null`
	for _, backend := range everyRunner(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			cmd := b.Command(b.Repo, []string{"--no-git-save", "--no-record"}, script)
			release := holdSession(t, cmd, filepath.Join(b.Repo, "ready"), "started")
			launcher := cmd.Process.Pid
			sw0, cpu0 := procActivity(t, launcher)
			sandboxtest.WriteFile(t, filepath.Join(b.Repo, "go"), "")
			if got, ok := untilReady(filepath.Join(b.Repo, "done"), nil); !ok {
				t.Fatalf("the loop never ended: %s\n%s", got, release())
			}
			sw1, cpu1 := procActivity(t, launcher)
			r := release()
			if r.Code != 0 {
				t.Fatalf("the session failed:\n%s", r)
			}
			cont, _ := os.ReadFile(filepath.Join(b.Repo, "continues"))
			c, err := strconv.Atoi(strings.TrimSpace(string(cont)))
			if err != nil {
				t.Fatalf("continues: %q: %v", cont, err)
			}
			times, _ := os.ReadFile(filepath.Join(b.Repo, "cpu"))
			t.Logf("%d continues; launcher: %d context switches, %d ticks of CPU; the command's times:\n%s", c, sw1-sw0, cpu1-cpu0, times)
			if c < 100 {
				t.Fatalf("the command was continued only %d times: the loop did not stop it", c)
			}
			if sw1-sw0 > int64(c)/10 {
				t.Errorf("the launcher woke %d times for %d stops of its command", sw1-sw0, c)
			}
		})
	}
}

// procActivity is a process's context switches (every thread's, voluntary and
// not) and its CPU time in clock ticks (utime+stime).
func procActivity(t *testing.T, pid int) (switches, ticks int64) {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid)
	tasks, err := os.ReadDir(dir + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(dir + "/task/" + task.Name() + "/status")
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				switches += n
			}
		}
	}
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return switches, u + k
}
