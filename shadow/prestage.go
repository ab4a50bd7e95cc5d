package shadow

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Staging many new files before the full sweep's `git add --all`, in batches. The
// sweep stores every blob by bulk check-in (core.bigFileThreshold=1, see stage): one
// pack instead of a loose object per file. But Git 2.39's bulk check-in looks each
// new object up in the list of those it already wrote, one by one
// (bulk-checkin.c, already_written): quadratic in the files one process adds, which
// dominates a first record of a big tree.
//
// So when the sweep will add many files — the first record, or a session that made
// more than maxChangedPaths — the files Git would add (`ls-files --others
// --exclude-standard`: untracked and not ignored, by the same rules and config as
// the sweep's `git add`) are written first by `update-index --add` in batches of
// preStageBatch, each its own process and pack. The sweep then finds them in the
// index with their stat data and only lstat's them; it adds what the batches did
// not (a file made since, a nested repository, whatever a batch refused) and
// removes what is gone. The batches are a head start only: the sweep decides what
// the index holds, with its bounds (bounds.go) and notes, as before — with one
// window, the one `git add` has between reading a directory and hashing its files,
// only longer: a file staged by a batch that then, before the sweep, becomes ignored
// (a .gitignore written meanwhile), part of a new nested repository, or unreadable,
// stays as the batch staged it. A record taken while something else changes the
// tree (a second session, the host's user) holds each file as it was at some moment
// of the record; the sandbox of the session itself starts after it.
//
// The batches together run for at most about twice gitTimeout: none starts after
// the head start has used gitTimeout.
//
// A batch that fails — a bound hit (a FIFO swapped in, a huge file), a path Git
// refuses, a file gone or become a directory — ends the head start: its pack is
// unfinished and its index unwritten, both are removed, and the sweep does the rest.
const (
	// preStageMin: fewer new files than this and the comparisons cost less than
	// the listing.
	preStageMin = 2000
	// preStageMaxPacks: batches are made larger rather than leave more packs than
	// this from one sweep, so that the record's maintain does not repack them all
	// right away (maxPacks).
	preStageMaxPacks = maxPacks - 2
)

// preStageBatch: files per process, each comparing each new object with those it
// wrote, so a batch's comparisons grow with its square; each batch rewrites the
// growing index once. A variable for the tests only.
var preStageBatch = 8192

// preStageNow is the head start's clock, which its time bound is measured on. A
// variable for the tests only: they advance it instead of sleeping.
var preStageNow = time.Now

// preStageMaxList bounds the listing read into memory (a tree of millions of files
// sweeps without the head start). A variable for the tests only.
var preStageMaxList = 256 << 20

// mallocKeep keeps glibc from giving the heap's top back to the kernel after each
// object (M_TRIM_THRESHOLD, 128 KiB by default): update-index frees zlib's 256 KiB
// of deflate state after each blob, and taking it back zeroed from the kernel, with
// the TLB shootdowns of returning it, would cost more than the blobs themselves.
// Only glibc reads it; anything else ignores it.
const mallocKeep = "GLIBC_TUNABLES=glibc.malloc.trim_threshold=33554432"

// preStage gives the sweep of wt its head start, as above, and reports whether it
// staged anything. progress, when not nil, is told how many of how many new files
// are staged after each batch.
//
// What pricing left out (skip, price.go) is not staged.
func (s *Store) preStage(wt git, skip []Skipped, progress func(done, total int)) bool {
	// Read up to the bound only: past it the writer fails, and Git with it.
	list := cappedBuffer{max: preStageMaxList}
	if wt.stream(&list, "ls-files", "-z", "--others", "--exclude-standard") != nil {
		return false
	}
	out := make(map[string]bool, len(skip))
	for _, sk := range skip {
		out[sk.Path] = true
	}
	var paths []string
	for p := range strings.SplitSeq(string(list.b), "\x00") {
		// A nested repository is listed as its directory ("sub/"): the sweep adds
		// it as a gitlink, and names it.
		if p != "" && !strings.HasSuffix(p, "/") && !out[p] {
			paths = append(paths, p)
		}
	}
	if len(paths) < preStageMin {
		return false
	}
	batch := max(preStageBatch, (len(paths)+preStageMaxPacks-1)/preStageMaxPacks)
	staged := false
	var in bytes.Buffer
	start := preStageNow()
	for lo := 0; lo < len(paths); lo += batch {
		// Each batch is bounded by gitTimeout, and so are all of them: batches
		// that each stay just under it (files slow to hash) must not hold the
		// store's lock many times as long as one sweep would.
		if preStageNow().Sub(start) >= gitTimeout {
			return staged
		}
		hi := min(lo+batch, len(paths))
		in.Reset()
		for _, p := range paths[lo:hi] {
			in.WriteString(p)
			in.WriteByte(0)
		}
		// --remove: a file removed since the listing leaves no error (it is in no
		// index); no --replace: a file become a directory is an error, and the
		// head start ends.
		_, _, err := wt.run3([]string{mallocKeep}, &in,
			"-c", "core.bigFileThreshold=1", "update-index", "--add", "--remove", "-z", "--stdin")
		if err != nil {
			// A bound's file is the sweep's to name: it meets it again.
			s.dropUnfinished()
			return staged
		}
		staged = true
		s.preStaged++
		if progress != nil {
			progress(hi, len(paths))
		}
	}
	return staged
}

// cappedBuffer keeps what is written to it up to max bytes; a write beyond fails.
type cappedBuffer struct {
	b   []byte
	max int
}

var errListTooLong = errors.New("listing longer than its bound")

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if len(p) > c.max-len(c.b) {
		return 0, errListTooLong
	}
	c.b = append(c.b, p...)
	return len(p), nil
}

// dropUnfinished removes what a killed or failed Git left: the index's lock and the
// temporary files of a pack it had not finished. The caller holds the store's lock,
// so no other Git of this store is writing them.
func (s *Store) dropUnfinished() {
	_ = os.Remove(filepath.Join(s.Dir, "index.lock"))
	tmp, _ := filepath.Glob(filepath.Join(s.Dir, "objects", "pack", "tmp_*"))
	for _, p := range tmp {
		_ = os.Remove(p)
	}
}
