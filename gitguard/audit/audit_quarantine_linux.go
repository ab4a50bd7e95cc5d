package audit

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Quarantine moves each finding's item aside, in place, to
// NAME.agentbox-quarantine-ID (NAME.agentbox-quarantine-ID-2 … when taken), so Git
// no longer reads or runs it and the user can inspect it. Nothing is deleted. When
// the danger is one key in a config file, the whole file moves: a file Git reads
// half-edited is no safer. Findings about places that could not be inspected are
// left alone. It fills in Moved or MoveErr.
//
// The parent directory is opened without following symlinks, and the rename never
// replaces an existing name. A parent the sandbox made read-only is made writable for
// the owner for the rename and restored after.
func Quarantine(findings []Finding, id string) {
	for i := range findings {
		f := &findings[i]
		if f.Kind == "" {
			continue
		}
		f.Moved, f.MoveErr = quarantine(f, id)
	}
}

func quarantine(f *Finding, id string) (string, error) {
	path := f.Path
	dir, name := filepath.Split(path)
	at := dir // opened beneath the held directory's descriptor when it lies in it
	r := f.relaxer()
	defer r.Restore()
	dfd, err := openParent(filepath.Clean(at), r) // audit_unreadable_linux.go
	if err != nil {
		return "", fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", dir, err)
	}
	if st.Mode&0o300 != 0o300 {
		// Journaled, and put back by r.Restore: internal/widen.
		if err := r.WidenOpen(dfd, filepath.Clean(at), 0o300); err != nil {
			return "", fmt.Errorf("make %s writable: %w", dir, err)
		}
	}
	// A name near NAME_MAX (255 bytes) is shortened so the suffix still fits; a
	// sandbox must not be able to keep a file in place by giving it a long name.
	keep := name
	if limit := unix.NAME_MAX - len(QuarantineSuffix) - len(id) - 3; len(keep) > limit && limit > 0 {
		keep = keep[:limit]
	}
	base := keep + QuarantineSuffix + id
	for n := 1; n < 100; n++ {
		target := base
		if n > 1 {
			target += "-" + strconv.Itoa(n)
		}
		err := unix.Renameat2(dfd, name, dfd, target, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) {
			// A filesystem without RENAME_NOREPLACE: check, then rename. The sandbox
			// is gone, so nothing races for the name.
			var tst unix.Stat_t
			err = unix.Fstatat(dfd, target, &tst, unix.AT_SYMLINK_NOFOLLOW)
			if err == nil {
				err = unix.EEXIST
			} else if errors.Is(err, unix.ENOENT) {
				err = unix.Renameat(dfd, name, dfd, target)
			}
		}
		if err == nil {
			return filepath.Join(dir, target), nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("rename %s: %w", path, err)
		}
	}
	return "", fmt.Errorf("rename %s: every quarantine name is taken", path)
}
