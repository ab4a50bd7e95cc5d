package main

import (
	"flag"

	"github.com/agentbox/agentbox/gitguard/snapshot"
	"github.com/agentbox/agentbox/session"
	"github.com/agentbox/agentbox/session/record"
)

// registerSessionFlags adds exec's flags that configure the session beyond the
// policy: the metadata snapshot (P8), the push guard (P9) and the shadow record.
func registerSessionFlags(fs *flag.FlagSet, cfg *session.Config) {
	registerGitSaveFlags(fs, cfg)
	registerPushFlags(fs, cfg)
	registerRecordFlags(fs, cfg)
}

func registerGitSaveFlags(fs *flag.FlagSet, cfg *session.Config) {
	g := &cfg.GitSave
	fs.BoolVar(&g.Disabled, "no-git-save", false, "do not snapshot the repository's Git metadata before launch")
	fs.BoolVar(&g.Disabled, "git-save-disabled", false, "same as --no-git-save")
	fs.StringVar(&g.Dir, "git-save-dir", "", "keep the Git metadata snapshots in the store at `DIR` (default: $XDG_STATE_HOME/agentbox/snapshots)")
	fs.IntVar(&g.Keep, "git-save-keep", snapshot.DefaultKeep, "keep the newest `N` snapshots of the repository, 0 keeps all")
	fs.StringVar(&g.KeepSize, "git-save-keep-size", record.DefaultKeepSize, "keep older snapshots of the repository only while all kept ones use at most `SIZE` bytes of the store (0: no byte budget)")
	fs.StringVar(&g.MaxSize, "git-save-max-size", "", "store at most `SIZE` new bytes per snapshot; a file beyond it is left out and named (suffix K, M, G, T; default 8G)")
}

func registerPushFlags(fs *flag.FlagSet, cfg *session.Config) {
	fs.BoolVar(&cfg.AllowGitPush, "allow-git-push", false, "allow git push and git send-pack inside the sandbox (the push guard is on by default)")
}

func registerRecordFlags(fs *flag.FlagSet, cfg *session.Config) {
	fs.BoolVar(&cfg.NoRecord, "no-record", false, "do not record the session in the shadow repository (agentbox log)")
}
