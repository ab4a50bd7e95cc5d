package grantledger

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRecordRead: what Record adds Read returns, once each, and a directory below
// one listed adds nothing; a name with a newline stays one entry.
func TestRecordRead(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state", "agentbox")
	if got, err := Read(state); err != nil || got != nil {
		t.Fatalf("Read of a missing ledger = %v, %v; want none", got, err)
	}
	odd := "/home/u/odd\n/usr/bin"
	if err := Record(state, []string{"/home/u/src/a", "/home/u/tools/bin", odd}); err != nil {
		t.Fatal(err)
	}
	if err := Record(state, []string{"/home/u/src/a", "/home/u/tools/bin/sub", "/home/u/src/b/"}); err != nil {
		t.Fatal(err)
	}
	got, err := Read(state)
	want := []string{"/home/u/src/a", "/home/u/tools/bin", odd, "/home/u/src/b"}
	if err != nil || !slices.Equal(Dirs(got), want) {
		t.Errorf("Read = %v, %v; want %q", got, err, want)
	}
	fi, err := os.Stat(Path(state))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ledger mode: %v, %v; want 0600", fi, err)
	}
	if err := Record(state, []string{"rel/dir"}); err == nil {
		t.Error("Record took a relative path")
	}
}

// TestReadRefuses: a ledger agentbox cannot take at its word refuses every lookup
// instead of counting as empty: removing a line would let a planted program run.
func TestReadRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		make func(t *testing.T, path string)
		want string
	}{
		{"symlink", func(t *testing.T, path string) {
			other := filepath.Join(filepath.Dir(path), "elsewhere")
			must(t, os.WriteFile(other, nil, 0o600))
			must(t, os.Symlink(other, path))
		}, "symbolic link"},
		{"group-writable", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte(`"/a"`+"\n"), 0o600))
			must(t, os.Chmod(path, 0o620))
		}, "chmod go-w"},
		{"fifo", func(t *testing.T, path string) {
			must(t, syscall.Mkfifo(path, 0o600))
		}, "not a regular file"},
		{"bad line", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte(`"/a"`+"\n/b\n"), 0o600))
		}, "line 2"},
		{"relative entry", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte(`"a/b"`+"\n"), 0o600))
		}, "line 1"},
		{"identity not three numbers", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte(`"/a" 1 2`+"\n"), 0o600))
		}, "line 1"},
		{"identity with inode 0", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte(`"/a" 1 0 3`+"\n"), 0o600))
		}, "line 1"},
		{"identity not decimal", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte(`"/a" 1 2 -3`+"\n"), 0o600))
		}, "line 1"},
		{"too large", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte(strings.Repeat(`"/a"`+"\n", maxBytes/4)), 0o600))
		}, "larger than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			state := t.TempDir()
			tt.make(t, Path(state))
			if got, err := Read(state); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Read = %v, %v; want a refusal saying %q", got, err, tt.want)
			}
			if err := Record(state, []string{"/x"}); err == nil {
				t.Error("Record wrote into a ledger it cannot trust")
			}
		})
	}
}

func TestStateDir(t *testing.T) {
	for _, tt := range [][3]string{
		{"/x/state", "/home/u", "/x/state/agentbox"},
		{"rel", "/home/u", "/home/u/.local/state/agentbox"},
		{"", "", ""},
	} {
		if got := StateDir(tt[0], tt[1]); got != tt[2] {
			t.Errorf("StateDir(%q, %q) = %q, want %q", tt[0], tt[1], got, tt[2])
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkRecordListed is what a launch pays when its grants are listed already
// (the common case: the same repository again): open, flock, read, close, in a
// ledger of 200 directories.
func BenchmarkRecordListed(b *testing.B) {
	state := b.TempDir()
	var dirs []string
	for i := range 200 {
		dirs = append(dirs, "/home/u/src/project-"+strings.Repeat("x", i%20)+string(rune('a'+i%26))+"/"+strconv.Itoa(i))
	}
	if err := Record(state, dirs); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := Record(state, dirs[100:101]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead is what each host lookup (LookPath, InitBinary) pays for it.
func BenchmarkRead(b *testing.B) {
	state := b.TempDir()
	var dirs []string
	for i := range 200 {
		dirs = append(dirs, "/home/u/src/p"+strconv.Itoa(i))
	}
	if err := Record(state, dirs); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Read(state); err != nil {
			b.Fatal(err)
		}
	}
}

// An operator who deleted a line by hand may leave the last one without its
// newline; the next launch's entry goes on a line of its own.
func TestRecordAfterAHandEdit(t *testing.T) {
	state := filepath.Join(t.TempDir(), "agentbox")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(Path(state), []byte(strconv.Quote("/home/u/a")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Record(state, []string{"/home/u/a/sub"}); err != nil {
		t.Fatal(err)
	}
	if err := Record(state, []string{"/home/u/b"}); err != nil {
		t.Fatal(err)
	}
	got, err := Read(state)
	if want := []string{"/home/u/a", "/home/u/b"}; err != nil || !slices.Equal(Dirs(got), want) {
		t.Errorf("Read = %v, %v; want %q", got, err, want)
	}
}

// TestRecordIdentity: a directory is listed with its identity, which a rename
// keeps; a directory below an entry that is still the one recorded adds nothing,
// while one below an entry that has been renamed since, or whose identity was never
// recorded (a ledger from before identities were kept, which still reads), gets an
// identity line of its own.
func TestRecordIdentity(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	tools := filepath.Join(base, "tools")
	must(t, os.MkdirAll(filepath.Join(tools, "bin"), 0o700))
	must(t, os.MkdirAll(state, 0o700))
	must(t, os.WriteFile(Path(state), []byte(strconv.Quote(tools)+"\n"), 0o600))
	got, err := Read(state)
	if err != nil || len(got) != 1 || got[0].ID.Known() {
		t.Fatalf("Read of an old ledger = %v, %v; want one entry without identity", got, err)
	}
	must(t, Record(state, []string{tools}))
	id := IdentityOf(tools)
	if got, err = Read(state); err != nil || !slices.Equal(identities(got), []Entry{{tools, id}}) || !id.Known() {
		t.Fatalf("Read = %v, %v; want the old line and %s with identity %v", got, err, tools, id)
	}
	must(t, Record(state, []string{tools, filepath.Join(tools, "bin")}))
	if got, err = Read(state); err != nil || len(got) != 2 {
		t.Fatalf("Read = %v, %v; a listed directory and one below it added lines", got, err)
	}
	renamed := filepath.Join(base, "tools-renamed")
	must(t, os.Rename(tools, renamed))
	if IdentityOf(renamed) != id {
		t.Fatalf("a rename changed the identity: %v, want %v", IdentityOf(renamed), id)
	}
	bin := filepath.Join(tools, "bin")
	must(t, os.MkdirAll(bin, 0o700))
	must(t, Record(state, []string{bin}))
	got, err = Read(state)
	if want := []Entry{{tools, id}, {bin, IdentityOf(bin)}}; err != nil || !slices.Equal(identities(got), want) {
		t.Fatalf("Read = %v, %v; want a line for the new tools/bin, as tools is another directory now", got, err)
	}
}

// TestRecordRemadeDirectory: a directory removed and made again at a listed path
// gets a line with its new identity, up to maxIdentities lines a path, and then no
// more: a CI script's checkout made anew for every session does not grow the
// ledger to its bound.
func TestRecordRemadeDirectory(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	work := filepath.Join(base, "work")
	for i := range maxIdentities + 4 {
		// Moved away, not removed: a directory made within the same clock tick on
		// the inode just freed would have the same identity, and add nothing.
		must(t, os.Mkdir(work, 0o700))
		must(t, Record(state, []string{work}))
		must(t, os.Rename(work, fmt.Sprintf("%s.%d", work, i)))
	}
	got, err := Read(state)
	if err != nil || len(got) != maxIdentities+1 || len(identities(got)) != maxIdentities {
		t.Fatalf("Read = %v, %v; want the path and %d identities", got, err, maxIdentities)
	}
	for _, e := range got {
		if e.Dir != work {
			t.Errorf("entry %v, want %s", e, work)
		}
	}
}

// TestPathsKeepTheirFormat: the paths' file holds one quoted absolute path a line
// and nothing else, each path once, whatever the identities: the format an
// agentbox (or a Go program built with one) from before identities were kept
// requires of every line, refusing every launch otherwise.
func TestPathsKeepTheirFormat(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	dirs := []string{filepath.Join(base, "a"), filepath.Join(base, "b"), filepath.Join(base, "gone")}
	must(t, os.Mkdir(dirs[0], 0o700))
	must(t, os.Mkdir(dirs[1], 0o700))
	for i := range 3 {
		must(t, Record(state, dirs))
		must(t, os.Rename(dirs[1], fmt.Sprintf("%s.%d", dirs[1], i)))
		must(t, os.Mkdir(dirs[1], 0o700))
	}
	data, err := os.ReadFile(Path(state))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		dir, err := strconv.Unquote(line)
		if err != nil || !filepath.IsAbs(dir) {
			t.Errorf("line %q is not a quoted absolute path alone", line)
		}
		listed = append(listed, dir)
	}
	if !slices.Equal(listed, dirs) {
		t.Errorf("paths listed %q, want %q once each", listed, dirs)
	}
	if got, err := Read(state); err != nil || len(identities(got)) != 4 {
		t.Errorf("Read = %v, %v; want a, and b three times, with identities", got, err)
	}
}

// identities are the entries with an identity.
func identities(entries []Entry) []Entry {
	var with []Entry
	for _, e := range entries {
		if e.ID.Known() {
			with = append(with, e)
		}
	}
	return with
}

// TestReadWaitsForRecord: a lookup reading the ledger while another launch's
// Record appends to it saw the append in part (a write crossing a page of the page
// cache is seen a page at a time), a line cut short, and refused as if the ledger
// were damaged. Read waits for Record's lock (shared): here a writer holding it
// with half an identity line written, and Read started before the rest is.
func TestReadWaitsForRecord(t *testing.T) {
	state := filepath.Join(t.TempDir(), "agentbox")
	dir := t.TempDir()
	if err := Record(state, []string{dir}); err != nil {
		t.Fatal(err)
	}
	paths, err := os.OpenFile(Path(state), os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer paths.Close()
	if err := syscall.Flock(int(paths.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ids, err := os.OpenFile(IdentityPath(state), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ids.Close()
	line := format(Entry{Dir: "/srv/other", ID: Identity{Dev: 1, Ino: 2, Birth: 3}}) + "\n"
	if _, err := ids.WriteString(line[:10]); err != nil {
		t.Fatal(err)
	}
	type result struct {
		entries []Entry
		err     error
	}
	done := make(chan result, 1)
	go func() {
		entries, err := Read(state)
		done <- result{entries, err}
	}()
	// Read has had its chance to read the half line (a pause, not a bound: with
	// the wait it blocks, and either way the answer is checked below).
	select {
	case r := <-done:
		t.Fatalf("Read did not wait for the lock held by a Record: %v, %v", r.entries, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := ids.WriteString(line[10:]); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(paths.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if want := []string{dir, dir, "/srv/other"}; r.err != nil || !slices.Equal(Dirs(r.entries), want) {
		t.Errorf("Read after the append = %v, %v; want %q", r.entries, r.err, want)
	}
}
