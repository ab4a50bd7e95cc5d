package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/agentbox/agentbox/gitguard/snapshot"
	"github.com/agentbox/agentbox/shadow"
)

// lastSession is the id of the newest session recorded for the repository of the
// working directory: what show, diff and restore take when given none.
func lastSession(state string) (string, error) {
	repo, err := repoFor("")
	if err != nil {
		return "", err
	}
	none := fmt.Errorf("no sessions recorded for %s: give a session id (agentbox log --all lists every repository's)", oneLine(repo))
	s, err := shadow.OpenExisting(state, repo)
	if errors.Is(err, fs.ErrNotExist) {
		return "", none
	}
	if err != nil {
		return "", err
	}
	recs, err := s.Sessions()
	if err != nil {
		return "", err
	}
	if len(recs) == 0 {
		return "", none
	}
	sortNewestFirst(recs)
	return recs[0].ID, nil
}

// sessionSnapshot turns restore's argument into a snapshot path: a path that exists
// is one; otherwise it is a session id (empty: the last session of this repository),
// whose record names the snapshot taken before it started.
func sessionSnapshot(arg string) (string, error) {
	if arg != "" {
		if _, err := os.Lstat(arg); err == nil || snapshot.IsStoredSnapshot(arg) {
			return arg, nil
		}
	}
	state, err := stateDir()
	if err != nil {
		return "", err
	}
	id := arg
	if id == "" {
		if id, err = lastSession(state); err != nil {
			return "", err
		}
	}
	_, rec, err := shadow.Find(state, id)
	if errors.Is(err, shadow.ErrNotFound) {
		return "", fmt.Errorf("%s: neither a snapshot file nor a recorded session (agentbox log lists them)", oneLine(arg))
	}
	if err != nil {
		return "", err
	}
	if rec.Snapshot == "" {
		return "", fmt.Errorf("session %s has no Git snapshot (it ran with --no-git-save or --read-only)", rec.ID)
	}
	return rec.Snapshot, nil
}
