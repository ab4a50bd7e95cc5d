package bench

// The scaling scenario (`agentbox bench --scale`): what the session's host-side work
// (snapshot, audit, record) costs as the repository grows. It generates repositories
// of a given shape once into a cache directory, then measures, interleaved round by
// round, a bare launch, a default launch, `git status --porcelain` and a default
// launch whose command changes ten tracked files; then the first session of the
// repository against `git add -A` into a fresh repository, and the disk that twenty
// unchanged default sessions leave behind.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/hostpath"
)

// ScaleConfig is one scaling run.
type ScaleConfig struct {
	Agentbox string   // the agentbox binary measured
	Specs    []string // repository shapes, "FILES" or "FILES:PACK" (e.g. "20", "100000:1.5G")
	Runs     int      // measured rounds per repository
	Warmup   int      // discarded rounds per repository
	First    int      // first-session measurements per repository (each from an empty state)
	Sessions int      // unchanged sessions whose disk is measured
	CacheDir string   // where generated repositories are kept between runs
	// ExtraFlags are added to every default launch (for instance a --git-save-dir
	// the code under test needs); bare launches get --no-git-save --no-record.
	ExtraFlags []string
	// Against, when set, is another agentbox binary whose default and changed-ten
	// sessions run in the same rounds, on a copy of the repository with its own
	// state (sessions of one binary would otherwise be changes between sessions
	// for the other's record).
	Against  string
	Progress io.Writer
	// Log, when set, gets each repository's rows as soon as they are measured
	// (a long run that is stopped keeps what it measured).
	Log io.Writer

	git, cp string // the host's programs RunScale runs (hostpath.LookPath)
}

// ScaleSpec is one repository shape.
type ScaleSpec struct {
	Files     int   // tracked files in the work tree (small text files)
	PackBytes int64 // incompressible history packed into .git (0: none)
}

// ParseScaleSpec reads "FILES" or "FILES:PACK", PACK with a K, M or G suffix
// ("1.5G").
func ParseScaleSpec(s string) (ScaleSpec, error) {
	f, p, hasPack := strings.Cut(s, ":")
	n, err := strconv.Atoi(strings.TrimSuffix(strings.ToLower(f), "k"))
	if err == nil && strings.HasSuffix(strings.ToLower(f), "k") {
		n *= 1000
	}
	if err != nil || n < 1 || n > 10_000_000 {
		return ScaleSpec{}, fmt.Errorf("repository shape %q: FILES must be a count from 1 to 10000000 (e.g. 20, 100000:1.5G)", s)
	}
	spec := ScaleSpec{Files: n}
	if hasPack {
		mult := 1.0
		switch strings.ToUpper(p[len(p)-min(1, len(p)):]) {
		case "K":
			mult = 1 << 10
		case "M":
			mult = 1 << 20
		case "G":
			mult = 1 << 30
		}
		if mult > 1 {
			p = p[:len(p)-1]
		}
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v < 0 || v*mult > 1<<40 {
			return ScaleSpec{}, fmt.Errorf("repository shape %q: PACK must be a size such as 300M or 1.5G", s)
		}
		spec.PackBytes = int64(v * mult)
	}
	return spec, nil
}

func (s ScaleSpec) name() string {
	if s.PackBytes == 0 {
		return fmt.Sprintf("files%d", s.Files)
	}
	return fmt.Sprintf("files%d-pack%dM", s.Files, s.PackBytes>>20)
}

// ScaleRow is the result for one repository.
type ScaleRow struct {
	Spec       ScaleSpec
	GitBytes   int64 // disk blocks of .git
	Bare       time.Duration
	Defaults   time.Duration
	Changed10  time.Duration
	Status     time.Duration
	DefOverSt  float64 // median of defaults / status, round by round
	ChgOverSt  float64
	DefOverBar float64
	First      time.Duration // first default session, fresh state
	AddA       time.Duration // git add -A into a fresh repository
	FirstOverA float64
	SnapFirst  int64 // disk added by the first session's snapshot
	SnapEach   int64 // median disk added by one more unchanged session's snapshot
	SnapTotal  int64 // disk of the snapshots after Sessions sessions
	ShadowDisk int64 // disk of the state directory (shadow store) after one session
	PackDisk   int64 // disk of .git/objects/pack
	Sessions   int
	Failures   []string
	// With ScaleConfig.Against: that binary's sessions in the same rounds.
	AgDefaults   time.Duration
	AgChanged10  time.Duration
	AgDefOverSt  float64 // median of against-defaults / status, round by round
	AgChgOverSt  float64
	DefOverAgDef float64 // median of defaults / against-defaults, round by round
	ChgOverAgChg float64
}

// RunScale runs the scaling scenario for every spec and returns a row each.
func RunScale(cfg ScaleConfig) ([]ScaleRow, error) {
	if cfg.Runs < 1 {
		cfg.Runs = 9
	}
	if cfg.Sessions < 1 {
		cfg.Sessions = 20
	}
	if cfg.First < 1 {
		cfg.First = 1
	}
	if cfg.CacheDir == "" {
		return nil, errors.New("bench --scale: no cache directory ($XDG_CACHE_HOME and $HOME unset)")
	}
	// The host's git and cp, never one a session could have planted on PATH (a
	// directory an earlier session was given writable, a repository).
	var err error
	if cfg.git, err = hostpath.LookPath("git"); err != nil {
		return nil, fmt.Errorf("bench --scale: %w", err)
	}
	if cfg.cp, err = hostpath.LookPath("cp"); err != nil {
		return nil, fmt.Errorf("bench --scale: %w", err)
	}
	var rows []ScaleRow
	for _, s := range cfg.Specs {
		spec, err := ParseScaleSpec(s)
		if err != nil {
			return nil, err
		}
		repo, err := scaleRepo(cfg, spec)
		if err != nil {
			return nil, err
		}
		row, err := runScaleRepo(cfg, spec, repo)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
		if cfg.Log != nil {
			WriteScaleText(cfg.Log, []ScaleRow{row}, cfg.Runs)
		}
	}
	return rows, nil
}

func (cfg ScaleConfig) progress(format string, a ...any) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "\r\033[Kagentbox bench --scale: "+format, a...)
	}
}

// scaleRepo returns the cached repository of spec, generating it when missing. A
// repository is ready when its ".ready" marker exists; a half-made one is removed and
// made again.
func scaleRepo(cfg ScaleConfig, spec ScaleSpec) (string, error) {
	base := filepath.Join(cfg.CacheDir, "bench", "scale", spec.name()+"-v2")
	repo := filepath.Join(base, "repo")
	if _, err := os.Stat(filepath.Join(base, ".ready")); err == nil {
		return repo, nil
	}
	if err := os.RemoveAll(base); err != nil {
		return "", fmt.Errorf("bench --scale: %w", err)
	}
	if err := os.MkdirAll(repo, 0o755); err != nil {
		return "", fmt.Errorf("bench --scale: %w", err)
	}
	cfg.progress("generating %s in %s …", spec.name(), repo)
	t0 := time.Now()
	if err := generateRepo(cfg.git, repo, spec); err != nil {
		return "", fmt.Errorf("bench --scale: generate %s: %w", repo, err)
	}
	if err := os.WriteFile(filepath.Join(base, ".ready"), []byte(time.Since(t0).String()+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("bench --scale: %w", err)
	}
	return repo, nil
}

// git runs the host's git (bin, hostpath.LookPath's) in dir.
func git(bin, dir string, stdin io.Reader, args ...string) error {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@agentbox.invalid",
		"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@agentbox.invalid")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// smallPath is the path of the i-th small file: 100 per directory.
func smallPath(i int) string {
	return fmt.Sprintf("src/d%04d/f%03d.txt", i/100, i%100)
}

// generateRepo writes the history through one `git fast-import` (one pack): a first
// commit with the small files and spec.PackBytes of random 1 MiB blobs under
// history/, a second that removes history/. Then it checks the small files out.
func generateRepo(gitBin, repo string, spec ScaleSpec) error {
	if err := git(gitBin, repo, nil, "init", "-q", "-b", "main"); err != nil {
		return err
	}
	cmd := exec.Command(gitBin, "fast-import", "--quiet", "--done")
	cmd.Dir = repo
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	w := bufio.NewWriterSize(in, 1<<20)
	werr := writeImport(w, spec)
	if werr == nil {
		werr = w.Flush()
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git fast-import: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	if werr != nil {
		return werr
	}
	// A checkout writes the work tree and the index.
	if err := git(gitBin, repo, nil, "checkout", "-q", "-f", "main"); err != nil {
		return err
	}
	return settleRepo(gitBin, repo)
}

// settleRepo leaves the repository as a user's usually is: packed by `git gc`, and
// with a fresh index. The checkout wrote most files in the same second as the index,
// so Git keeps them racily clean (their size smudged) and `git status` would read
// every one of them again; a refresh once the clock has moved past the index's
// mtime stores their real stat data.
func settleRepo(gitBin, repo string) error {
	if err := git(gitBin, repo, nil, "gc", "-q"); err != nil {
		return err
	}
	st, err := os.Stat(filepath.Join(repo, ".git", "index"))
	if err != nil {
		return err
	}
	if wait := time.Until(st.ModTime().Truncate(time.Second).Add(1100 * time.Millisecond)); wait > 0 {
		time.Sleep(wait)
	}
	return git(gitBin, repo, nil, "update-index", "-q", "--really-refresh")
}

func writeImport(w *bufio.Writer, spec ScaleSpec) error {
	rng := rand.New(rand.NewChaCha8([32]byte{'a', 'g', 'e', 'n', 't', 'b', 'o', 'x'}))
	mark := 0
	const chunk = 1 << 20
	nbig := int((spec.PackBytes + chunk - 1) / chunk)
	buf := make([]byte, chunk)
	for i := 0; i < nbig; i++ {
		mark++
		for j := 0; j < len(buf); j += 8 {
			v := rng.Uint64()
			for k := 0; k < 8; k++ {
				buf[j+k] = byte(v >> (8 * k))
			}
		}
		fmt.Fprintf(w, "blob\nmark :%d\ndata %d\n", mark, len(buf))
		w.Write(buf)
		w.WriteString("\n")
	}
	bigMarks := mark
	for i := 0; i < spec.Files; i++ {
		mark++
		body := fmt.Sprintf("file %d\n%016x%016x\n", i, rng.Uint64(), rng.Uint64())
		fmt.Fprintf(w, "blob\nmark :%d\ndata %d\n%s\n", mark, len(body), body)
	}
	commit := func(msg string, ts int, body func()) {
		fmt.Fprintf(w, "commit refs/heads/main\ncommitter bench <bench@agentbox.invalid> %d +0000\ndata %d\n%s\n", ts, len(msg), msg)
		body()
		w.WriteString("\n")
	}
	commit("history and tree", 1700000000, func() {
		for i := 1; i <= bigMarks; i++ {
			fmt.Fprintf(w, "M 100644 :%d history/blob%05d.bin\n", i, i)
		}
		for i := 0; i < spec.Files; i++ {
			fmt.Fprintf(w, "M 100644 :%d %s\n", bigMarks+1+i, smallPath(i))
		}
	})
	if bigMarks > 0 {
		commit("drop history blobs", 1700000100, func() { w.WriteString("D history\n") })
	}
	_, err := w.WriteString("done\n")
	return err
}

// diskUsage is the disk blocks (st_blocks) of everything below path, each inode
// counted once.
func diskUsage(path string) int64 {
	var total int64
	seen := map[[2]uint64]bool{}
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil {
			return nil
		}
		k := [2]uint64{st.Dev, st.Ino}
		if !seen[k] {
			seen[k] = true
			total += st.Blocks * 512
		}
		return nil
	})
	return total
}

// runScaleRepo measures one repository.
func runScaleRepo(cfg ScaleConfig, spec ScaleSpec, repo string) (row ScaleRow, err error) {
	row = ScaleRow{Spec: spec, Sessions: cfg.Sessions}
	row.GitBytes = diskUsage(filepath.Join(repo, ".git"))
	row.PackDisk = diskUsage(filepath.Join(repo, ".git", "objects", "pack"))
	work, err := os.MkdirTemp("", "agentbox-bench-scale-")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(work)
	// Leave the cached repository as generated: the ten files back to their
	// committed content, whatever the sessions did.
	defer func() { _ = git(cfg.git, repo, nil, "checkout", "-q", "-f", "--", "src") }()

	r := &scaleRun{cfg: cfg, spec: spec, repo: repo, work: work}
	// The against binary's copy of the repository: the same tree, its own inodes;
	// the packs are hard links (immutable, and the snapshot store sees them as the
	// same files, as it would the original's).
	if cfg.Against != "" {
		r.againstRepo = filepath.Join(work, "against", "repo")
		if err := copyRepo(cfg.cp, repo, r.againstRepo); err != nil {
			return row, fmt.Errorf("bench --scale: copy %s for --against: %w", repo, err)
		}
	}
	if err := r.rounds(&row); err != nil {
		return row, err
	}
	if err := r.firstSessions(&row); err != nil {
		return row, err
	}
	if err := r.disk(&row); err != nil {
		return row, err
	}
	cfg.progress("")
	if cfg.Progress != nil {
		fmt.Fprint(cfg.Progress, "\r\033[K")
	}
	return row, nil
}

// scaleRun is one repository's measurement by runScaleRepo, in a work directory
// of its own.
type scaleRun struct {
	cfg         ScaleConfig
	spec        ScaleSpec
	repo, work  string
	againstRepo string // the --against binary's copy, "" without --against
}

// launchWith runs one session of bin in repo and returns how long it took.
func (r *scaleRun) launchWith(bin, repo, state, snaps string, bare bool, command ...string) (time.Duration, error) {
	args := []string{"exec"}
	if bare {
		args = append(args, "--no-git-save", "--no-record")
	} else {
		args = append(args, "--git-save-dir", snaps)
		args = append(args, r.cfg.ExtraFlags...)
	}
	args = append(append(args, "--repo", repo, "--"), command...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %v: %s", bin, strings.Join(args, " "), err, lastLine(stderr.String()))
	}
	return d, nil
}

// launch runs one session of the measured binary in the repository.
func (r *scaleRun) launch(state, snaps string, bare bool, command ...string) (time.Duration, error) {
	return r.launchWith(r.cfg.Agentbox, r.repo, state, snaps, bare, command...)
}

func timeGit(bin, dir string, args ...string) (time.Duration, error) {
	t0 := time.Now()
	err := git(bin, dir, nil, args...)
	return time.Since(t0), err
}

// scaleSample is one timing round: each kind of launch once, in a random order.
type scaleSample struct{ bare, def, chg, st, agDef, agChg time.Duration }

// rounds times the launches against git status, in rounds that share one state
// and snapshot directory, as a user's sessions do.
func (r *scaleRun) rounds(row *ScaleRow) error {
	cfg, spec, repo, work := r.cfg, r.spec, r.repo, r.work
	var changeCmd strings.Builder
	changeCmd.WriteString("n=$(date +%s%N)")
	for i := 0; i < 10 && i < spec.Files; i++ {
		p := smallPath(i * max(1, spec.Files/10))
		fmt.Fprintf(&changeCmd, "; echo $n >> %s", p)
	}
	state, snaps := filepath.Join(work, "state"), filepath.Join(work, "snaps")
	if _, err := r.launch(state, snaps, false, "true"); err != nil { // the first record, outside the rounds
		return err
	}
	agState, agSnaps := filepath.Join(work, "against", "state"), filepath.Join(work, "against", "snaps")
	names := []string{"bare", "defaults", "changed10", "status"}
	if r.againstRepo != "" {
		if _, err := r.launchWith(cfg.Against, r.againstRepo, agState, agSnaps, false, "true"); err != nil {
			return err
		}
		names = append(names, "against-defaults", "against-changed10")
	}
	var samples []scaleSample
	for round := 0; round < cfg.Warmup+cfg.Runs; round++ {
		cfg.progress("%s: round %d/%d", spec.name(), round+1, cfg.Warmup+cfg.Runs)
		var s scaleSample
		for _, i := range rand.Perm(len(names)) {
			var err error
			switch names[i] {
			case "bare":
				s.bare, err = r.launch(state, snaps, true, "true")
			case "defaults":
				s.def, err = r.launch(state, snaps, false, "true")
			case "changed10":
				s.chg, err = r.launch(state, snaps, false, "sh", "-c", changeCmd.String())
			case "status":
				s.st, err = timeGit(cfg.git, repo, "status", "--porcelain")
			case "against-defaults":
				s.agDef, err = r.launchWith(cfg.Against, r.againstRepo, agState, agSnaps, false, "true")
			case "against-changed10":
				s.agChg, err = r.launchWith(cfg.Against, r.againstRepo, agState, agSnaps, false, "sh", "-c", changeCmd.String())
			}
			if err != nil {
				return err
			}
		}
		if round >= cfg.Warmup {
			samples = append(samples, s)
		}
	}
	r.medians(row, samples)
	if r.againstRepo != "" {
		os.RemoveAll(filepath.Join(work, "against"))
	}
	os.RemoveAll(state)
	os.RemoveAll(snaps)
	return nil
}

// medians fills row's timings and ratios with the medians of samples.
func (r *scaleRun) medians(row *ScaleRow, samples []scaleSample) {
	col := func(f func(scaleSample) float64) float64 {
		v := make([]float64, len(samples))
		for i, s := range samples {
			v[i] = f(s)
		}
		return median(v)
	}
	dur := func(f func(scaleSample) time.Duration) time.Duration {
		return time.Duration(col(func(s scaleSample) float64 { return float64(f(s)) }))
	}
	row.Bare = dur(func(s scaleSample) time.Duration { return s.bare })
	row.Defaults = dur(func(s scaleSample) time.Duration { return s.def })
	row.Changed10 = dur(func(s scaleSample) time.Duration { return s.chg })
	row.Status = dur(func(s scaleSample) time.Duration { return s.st })
	row.DefOverSt = col(func(s scaleSample) float64 { return float64(s.def) / float64(s.st) })
	row.ChgOverSt = col(func(s scaleSample) float64 { return float64(s.chg) / float64(s.st) })
	row.DefOverBar = col(func(s scaleSample) float64 { return float64(s.def) / float64(s.bare) })
	if r.againstRepo != "" {
		row.AgDefaults = dur(func(s scaleSample) time.Duration { return s.agDef })
		row.AgChanged10 = dur(func(s scaleSample) time.Duration { return s.agChg })
		row.AgDefOverSt = col(func(s scaleSample) float64 { return float64(s.agDef) / float64(s.st) })
		row.AgChgOverSt = col(func(s scaleSample) float64 { return float64(s.agChg) / float64(s.st) })
		row.DefOverAgDef = col(func(s scaleSample) float64 { return float64(s.def) / float64(s.agDef) })
		row.ChgOverAgChg = col(func(s scaleSample) float64 { return float64(s.chg) / float64(s.agChg) })
	}
}

// firstSessions times the first session, each from an empty state, against git
// add -A of the same tree into a fresh repository.
func (r *scaleRun) firstSessions(row *ScaleRow) error {
	var firsts, adds, ratios []float64
	for i := 0; i < r.cfg.First; i++ {
		r.cfg.progress("%s: first session %d/%d", r.spec.name(), i+1, r.cfg.First)
		st, sn := filepath.Join(r.work, "first-state"), filepath.Join(r.work, "first-snaps")
		d, err := r.launch(st, sn, false, "true")
		if err != nil {
			return err
		}
		if i == 0 {
			row.ShadowDisk = diskUsage(st)
		}
		os.RemoveAll(st)
		os.RemoveAll(sn)
		fresh := filepath.Join(r.work, "fresh.git")
		if err := git(r.cfg.git, r.work, nil, "init", "-q", "--bare", fresh); err != nil {
			return err
		}
		a, err := timeGit(r.cfg.git, r.repo, "--git-dir", fresh, "--work-tree", r.repo, "add", "-A")
		os.RemoveAll(fresh)
		if err != nil {
			return err
		}
		firsts, adds, ratios = append(firsts, float64(d)), append(adds, float64(a)), append(ratios, float64(d)/float64(a))
	}
	row.First, row.AddA, row.FirstOverA = time.Duration(median(firsts)), time.Duration(median(adds)), median(ratios)
	return nil
}

// disk measures cfg.Sessions unchanged sessions into an empty snapshot directory
// (the state is warm: the record's first session is not what is measured here).
func (r *scaleRun) disk(row *ScaleRow) error {
	st, sn := filepath.Join(r.work, "disk-state"), filepath.Join(r.work, "disk-snaps")
	if _, err := r.launch(st, filepath.Join(r.work, "disk-warm"), false, "true"); err != nil {
		return err
	}
	os.RemoveAll(filepath.Join(r.work, "disk-warm"))
	var prev int64
	var incs []float64
	for i := 0; i < r.cfg.Sessions; i++ {
		r.cfg.progress("%s: disk, session %d/%d", r.spec.name(), i+1, r.cfg.Sessions)
		if _, err := r.launch(st, sn, false, "true"); err != nil {
			return err
		}
		now := diskUsage(sn) + snapshotStoreUsage(st)
		if i == 0 {
			row.SnapFirst = now
		} else {
			incs = append(incs, float64(now-prev))
		}
		prev = now
	}
	row.SnapTotal = prev
	if len(incs) > 0 {
		row.SnapEach = int64(median(incs))
	}
	return nil
}

// copyRepo copies the repository src (work tree and .git) to dst, hard-linking
// the pack files.
func copyRepo(cp, src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if out, err := exec.Command(cp, "-a", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp -a: %v: %s", err, bytes.TrimSpace(out))
	}
	pack := filepath.Join(dst, ".git", "objects", "pack")
	ents, err := os.ReadDir(pack)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".pack") {
			p := filepath.Join(pack, e.Name())
			if err := os.Remove(p); err != nil {
				return err
			}
			if err := os.Link(filepath.Join(src, ".git", "objects", "pack", e.Name()), p); err != nil {
				return err
			}
		}
	}
	return nil
}

// snapshotStoreUsage is the disk of snapshots kept in the state directory (the
// default place of the content-addressed store), 0 when there is none.
func snapshotStoreUsage(state string) int64 {
	p := filepath.Join(state, "agentbox", "snapshots")
	if _, err := os.Lstat(p); err != nil {
		return 0
	}
	return diskUsage(p)
}

// WriteScaleText prints the rows as the Markdown tables of docs/performance.md.
func WriteScaleText(w io.Writer, rows []ScaleRow, runs int) {
	ms := func(d time.Duration) string {
		if d >= 10*time.Second {
			return fmt.Sprintf("%.1f s", d.Seconds())
		}
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	mb := func(n int64) string { return fmt.Sprintf("%.2f MB", float64(n)/1e6) }
	fmt.Fprintf(w, "Launch times (medians of %d interleaved rounds; ratios are medians of per-round ratios):\n\n", runs)
	fmt.Fprintln(w, "| repository (.git on disk, files) | bare | defaults | 10 files changed | `git status --porcelain` | defaults / status | changed / status | defaults / bare |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s, %d files | %s | %s | %s | %s | %.2f× | %.2f× | %.2f× |\n", mb(r.GitBytes), r.Spec.Files,
			ms(r.Bare), ms(r.Defaults), ms(r.Changed10), ms(r.Status), r.DefOverSt, r.ChgOverSt, r.DefOverBar)
	}
	fmt.Fprintln(w, "\nFirst session and disk:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| repository | first session (empty state) | `git add -A` into a fresh repo | first / add | shadow store after it | own pack | first snapshot | each unchanged snapshot | snapshots after N sessions |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s, %d files | %s | %s | %.2f× | %s | %s | %s | %s | %s (N=%d) |\n", mb(r.GitBytes), r.Spec.Files,
			ms(r.First), ms(r.AddA), r.FirstOverA, mb(r.ShadowDisk), mb(r.PackDisk), mb(r.SnapFirst), mb(r.SnapEach), mb(r.SnapTotal), r.Sessions)
	}
	if len(rows) > 0 && rows[0].AgDefaults != 0 {
		fmt.Fprintln(w, "\nThis build against the --against build, in the same rounds (the latter on a copy of the repository with its own state):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| repository | defaults | against: defaults | defaults / against | 10 files changed | against: changed | changed / against | against: defaults / status | against: changed / status |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
		for _, r := range rows {
			fmt.Fprintf(w, "| %s, %d files | %s | %s | %.2f× | %s | %s | %.2f× | %.2f× | %.2f× |\n", mb(r.GitBytes), r.Spec.Files,
				ms(r.Defaults), ms(r.AgDefaults), r.DefOverAgDef, ms(r.Changed10), ms(r.AgChanged10), r.ChgOverAgChg, r.AgDefOverSt, r.AgChgOverSt)
		}
	}
}
