package audit_test

// Sequencer state and config keys from which Git takes the name of a program
// (audit_state_linux.go, audit_keys.go), each planted in a session on both backends
// after the same plant fired without a sandbox (TestAuditSessionE2E's control).
func init() { auditCases = append(auditCases, stateCases...) }

// strategyPlant puts a merge strategy program in the working tree: a strategy name
// with a slash, "../planted", makes Git run ./git-merge-../planted.
const strategyPlant = `mkdir -p git-merge-..; hook > git-merge-../planted; chmod +x git-merge-../planted; `

var stateCases = []auditCase{
	{name: "merge strategy in rebase-merge/strategy",
		setup: `echo b > g; git add g; git commit -qm b
			git -c sequence.editor="sed -i 1ibreak" rebase -q -i HEAD~1 >/dev/null 2>&1 || true
			test -d .git/rebase-merge`,
		plant:   strategyPlant + `echo ../planted > .git/rebase-merge/strategy; git commit -q --allow-empty -m moved`,
		trigger: "rebase --continue", moved: []string{".git/rebase-merge/strategy"}},
	{name: "merge strategy in sequencer/opts",
		setup: `echo b > g; git add g; git commit -qm b; git checkout -qb side; echo c > g; git commit -qam c
			echo d > h; git add h; git commit -qm d; git checkout -q main; echo x > g; git commit -qam x
			git cherry-pick side~1 side >/dev/null 2>&1 || true; test -d .git/sequencer`,
		plant:   strategyPlant + `printf '[options]\n\tstrategy = ../planted\n' >> .git/sequencer/opts; echo resolved > g; git add g`,
		trigger: "-c core.editor=true cherry-pick --continue", moved: []string{".git/sequencer/opts"}},
	{name: "remote helper named by remote.NAME.vcs in a nested repository's config",
		plant: `git init -q sub; mkdir -p sub/git-remote-..; hook > sub/git-remote-../planted; chmod +x sub/git-remote-../planted
			printf '[remote "o"]\n\turl = x\n\tvcs = ../planted\n' >> sub/.git/config`,
		trigger: "-C sub fetch -q o", moved: []string{"sub/.git/config"}},
}
