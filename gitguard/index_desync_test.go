package gitguard

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// indexEntryV2 is one version 2 entry (SHA-1) whose flags give nameLen as the
// name's length, followed by the name's bytes as given and Git's padding for
// nameLen.
func indexEntryV2(nameLen int, name []byte) []byte {
	var e bytes.Buffer
	binary.Write(&e, binary.BigEndian, []uint32{0, 0, 0, 0, 0, 0, 0o100644, 0, 0, 0})
	e.Write(bytes.Repeat([]byte{0xab}, 20))
	binary.Write(&e, binary.BigEndian, uint16(nameLen))
	e.Write(name)
	for e.Len() < (62+nameLen+8)&^7 {
		e.WriteByte(0)
	}
	return e.Bytes()
}

// TestIndexNameLengthFromFlags: Git takes a version 2-3 entry's name length from its
// flags (and from them where a version 4 entry ends), not from the name's NUL. An
// entry whose flags say 66 bytes for a name "-\0" followed by a whole fake entry
// reads, NUL by NUL, as two harmless entries; Git reads it as one entry "-" and then
// ".git/hooks/post-checkout", which its checkout writes. Such an index is one Git
// never writes: it cannot be read, so it is a danger.
func TestIndexNameLengthFromFlags(t *testing.T) {
	fake := indexEntryV2(1, []byte("b"))     // 64 bytes: the reader's second entry
	name := append([]byte("-\x00"), fake...) // Git's first entry's 66-byte name
	hook := indexEntryV2(24, []byte(".git/hooks/post-checkout"))
	var b bytes.Buffer
	b.WriteString("DIRC")
	binary.Write(&b, binary.BigEndian, []uint32{2, 2})
	b.Write(indexEntryV2(len(name), name))
	b.Write(hook)
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])

	// Git reads the hook's entry from this index.
	repo := t.TempDir()
	git := exec.Command("git", "init", "-q", repo)
	git.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(repo, ".git", "index"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	git = exec.Command("git", "-C", repo, "ls-files", "-z")
	git.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := git.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	if !strings.Contains(string(out), ".git/hooks/post-checkout\x00") {
		t.Fatalf("git does not read the crafted index as the test means: %q", out)
	}

	bad, n, err := UnsafeIndexPaths(bufio.NewReader(bytes.NewReader(b.Bytes())), 20)
	if err == nil && n == 0 {
		t.Errorf("an index Git reads as naming .git/hooks/post-checkout passes as safe (named %q)", bad)
	}

	// The same trick in version 4: flags say 3 bytes, the name is 1.
	var v4 bytes.Buffer
	v4.WriteString("DIRC")
	binary.Write(&v4, binary.BigEndian, []uint32{4, 1})
	binary.Write(&v4, binary.BigEndian, []uint32{0, 0, 0, 0, 0, 0, 0o100644, 0, 0, 0})
	v4.Write(bytes.Repeat([]byte{0xab}, 20))
	binary.Write(&v4, binary.BigEndian, uint16(3))
	v4.WriteString("\x00a\x00")
	if _, n, err := UnsafeIndexPaths(bufio.NewReader(bytes.NewReader(v4.Bytes())), 20); err == nil && n == 0 {
		t.Error("a version 4 entry whose flags disagree with its name's length passes as safe")
	}
}

// indexExtension is an index extension: its signature, size and data.
func indexExtension(sig string, data []byte) []byte {
	b := append([]byte(sig), 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[4:], uint32(len(data)))
	return append(b, data...)
}

// gitLsFiles is what the host's git lists of repo's index, with config args.
func gitLsFiles(t *testing.T, index []byte, config ...string) string {
	t.Helper()
	repo := t.TempDir()
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	git := exec.Command("git", "init", "-q", repo)
	git.Env = env
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(repo, ".git", "index"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	git = exec.Command("git", append(append([]string{"-C", repo}, config...), "ls-files", "-z")...)
	git.Env = env
	out, err := git.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return string(out)
}

// TestIndexEntryOffsetTable: Git reading an index on several threads (index.threads,
// a setting no audit refuses, or 10,000 entries a core) starts each block of entries
// where the IEOT extension says, found through the EOIE extension at the file's
// end. An IEOT whose block starts inside another extension's data makes Git read an
// entry ".git/hooks/post-checkout" that entry-by-entry reading never meets. An
// IEOT or EOIE that disagrees with where the entries lie is one Git never writes: a
// danger.
func TestIndexEntryOffsetTable(t *testing.T) {
	a, b := indexEntryV2(1, []byte("a")), indexEntryV2(1, []byte("b"))
	hook := indexEntryV2(24, []byte(".git/hooks/post-checkout"))
	entriesEnd := 12 + len(a) + len(b)
	hidden := indexExtension("ZZZZ", hook) // an optional extension Git skips
	hookAt := entriesEnd + 8               // the hidden entry, in its data
	ieot := make([]byte, 4+16)
	binary.BigEndian.PutUint32(ieot[0:], 1) // IEOT version
	binary.BigEndian.PutUint32(ieot[4:], uint32(hookAt))
	binary.BigEndian.PutUint32(ieot[8:], 1)
	binary.BigEndian.PutUint32(ieot[12:], uint32(12+len(a)))
	binary.BigEndian.PutUint32(ieot[16:], 1)
	ieotExt := indexExtension("IEOT", ieot)
	h := sha1.New()
	h.Write(hidden[:8])
	h.Write(ieotExt[:8])
	eoie := binary.BigEndian.AppendUint32(nil, uint32(entriesEnd))
	eoie = h.Sum(eoie)

	var idx bytes.Buffer
	idx.WriteString("DIRC")
	binary.Write(&idx, binary.BigEndian, []uint32{2, 2})
	idx.Write(a)
	idx.Write(b)
	idx.Write(hidden)
	idx.Write(ieotExt)
	idx.Write(indexExtension("EOIE", eoie))
	sum := sha1.Sum(idx.Bytes())
	idx.Write(sum[:])

	if got := gitLsFiles(t, idx.Bytes()); got != "a\x00b\x00" {
		t.Fatalf("git on one thread lists %q, want a and b", got)
	}
	if got := gitLsFiles(t, idx.Bytes(), "-c", "index.threads=3"); !strings.Contains(got, ".git/hooks/post-checkout\x00") {
		t.Fatalf("git on threads does not read the crafted index as the test means: %q", got)
	}
	bad, n, err := UnsafeIndexPaths(bufio.NewReader(bytes.NewReader(idx.Bytes())), 20)
	if err == nil && n == 0 {
		t.Errorf("an index Git reads on threads as naming .git/hooks/post-checkout passes as safe (named %q)", bad)
	}

	// The same extensions inside one more extension's data, so that a walk from
	// the entries' end meets only that one: Git finds the EOIE by its place.
	var nested bytes.Buffer
	nested.Write(idx.Bytes()[:entriesEnd])
	hookAt += 8
	binary.BigEndian.PutUint32(ieot[4:], uint32(hookAt))
	ieotExt = indexExtension("IEOT", ieot)
	eoie = h.Sum(binary.BigEndian.AppendUint32(nil, uint32(entriesEnd+8)))
	nested.Write(indexExtension("YYYY", append(append(append([]byte(nil), hidden...), ieotExt...), indexExtension("EOIE", eoie)...)))
	sum = sha1.Sum(nested.Bytes())
	nested.Write(sum[:])
	if got := gitLsFiles(t, nested.Bytes(), "-c", "index.threads=3"); !strings.Contains(got, ".git/hooks/post-checkout\x00") {
		t.Fatalf("git on threads does not read the nested index as the test means: %q", got)
	}
	if bad, n, err := UnsafeIndexPaths(bufio.NewReader(bytes.NewReader(nested.Bytes())), 20); err == nil && n == 0 {
		t.Errorf("an index whose EOIE lies inside another extension passes as safe (named %q)", bad)
	}
}

// TestIndexOfGitOnThreads: the indexes Git writes for reading on threads (IEOT and
// EOIE extensions, versions 2 and 4, 30,000 entries) are read whole and name
// nothing: entryOffsets never takes an operator's staging area for a plant.
func TestIndexOfGitOnThreads(t *testing.T) {
	repo := t.TempDir()
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	git := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "index.threads=4", "-c", "index.recordOffsetTable=true",
			"-c", "index.recordEndOfIndexEntries=true"}, args...)...)
		cmd.Env, cmd.Stdin = env, strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	git("", "init", "-q")
	blob := git("x\n", "hash-object", "-w", "--stdin")
	var list strings.Builder
	for i := range 30_000 {
		fmt.Fprintf(&list, "100644 %s\td%03d/sub/f%05d.txt\n", blob, i%300, i)
	}
	git(list.String(), "update-index", "--index-info")
	for _, v := range []string{"2", "4"} {
		git("", "update-index", "--index-version", v)
		git("", "update-index", "--add", "--cacheinfo", "100644,"+blob+",z"+v)
		idx, err := os.ReadFile(filepath.Join(repo, ".git", "index"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(idx, []byte("IEOT")) || !bytes.Contains(idx, []byte("EOIE")) {
			t.Fatalf("version %s: git wrote no IEOT and EOIE", v)
		}
		if bad, n, err := UnsafeIndexPaths(bufio.NewReader(bytes.NewReader(idx)), 20); err != nil || n != 0 {
			t.Errorf("version %s: an index Git wrote: %q, %d, %v", v, bad, n, err)
		}
	}
}

// TestGitRefusesNTFSDotGit: Git itself refuses to add the paths ntfsDotGit names
// (core.protectNTFS is on by default), so refusing them in an index costs no
// operator's staging area.
func TestGitRefusesNTFSDotGit(t *testing.T) {
	repo := t.TempDir()
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	git := func(args ...string) error {
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		cmd.Env = env
		return cmd.Run()
	}
	if err := git("init", "-q"); err != nil {
		t.Fatal(err)
	}
	const blob = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
	if err := git("update-index", "--add", "--cacheinfo", "100644,"+blob+",d/ok"); err != nil {
		t.Fatalf("git refuses an ordinary path: %v", err)
	}
	for _, p := range []string{"git~1/hooks/x", "GIT~1 ./x", ".git ./hooks/x", ".git::$INDEX_ALLOCATION/hooks/x", "a/.git./config"} {
		if !unsafeIndexPath([]byte(p)) {
			t.Errorf("%q: not refused", p)
		}
		if err := git("update-index", "--add", "--cacheinfo", "100644,"+blob+","+p); err == nil {
			t.Errorf("git adds %q: an index Git writes can hold it", p)
		}
	}
}
