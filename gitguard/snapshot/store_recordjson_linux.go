package snapshot

import (
	"github.com/agentbox/agentbox/internal/fixedjson"
)

// unmarshalRecord reads a record as json.Unmarshal does. An unchanged session's
// save reads the last record back and writes none; fixedjson's fast path spares
// the launcher encoding/json's reflection over Record's types, and what it does
// not take (a record some other version wrote differently, a string with an
// escape, a damaged file) is json.Unmarshal's to read or refuse.
func unmarshalRecord(b []byte, rec *Record) error {
	return fixedjson.Unmarshal(b, rec, readRecordFast)
}

// readRecordFast is fixedjson's fast path of a record; false: not taken.
func readRecordFast(r *fixedjson.Reader, rec *Record) bool {
	return r.Object(func(r *fixedjson.Reader, name []byte) int {
		switch string(name) {
		case "store_format":
			return fixedjson.Member(0, r.Int(&rec.StoreFormat))
		case "manifest":
			return fixedjson.Member(1, readManifestFast(r, &rec.Manifest))
		case "common":
			return fixedjson.Member(2, r.String(&rec.Common))
		case "worktree":
			return fixedjson.Member(3, r.String(&rec.Worktree))
		case "dotgit":
			return fixedjson.Member(4, r.String(&rec.DotGit))
		case "dotgit_mode":
			return fixedjson.Member(5, r.Uint32(&rec.DotGitMode))
		case "common_mode":
			return fixedjson.Member(6, r.Uint32(&rec.CommonMode))
		case "common_mtime":
			return fixedjson.Member(7, r.Int64(&rec.CommonMtime))
		case "worktree_mode":
			return fixedjson.Member(8, r.Uint32(&rec.WorktreeMode))
		case "worktree_mtime":
			return fixedjson.Member(9, r.Int64(&rec.WorktreeMtime))
		case "bytes":
			return fixedjson.Member(10, r.Int64(&rec.Bytes))
		case "new_bytes":
			return fixedjson.Member(11, r.Int64(&rec.NewBytes))
		case "entries":
			return fixedjson.Member(12, r.Int(&rec.Entries))
		case "skipped":
			return fixedjson.Member(13, r.Strings(&rec.Skipped))
		}
		return -1
	})
}

func readManifestFast(r *fixedjson.Reader, m *Manifest) bool {
	return r.Object(func(r *fixedjson.Reader, name []byte) int {
		switch string(name) {
		case "format":
			return fixedjson.Member(0, r.Int(&m.Format))
		case "repo":
			return fixedjson.Member(1, r.String(&m.Repo))
		case "git_common_dir":
			return fixedjson.Member(2, r.String(&m.GitCommonDir))
		case "git_dir":
			return fixedjson.Member(3, r.String(&m.GitDir))
		case "dotgit_file":
			return fixedjson.Member(4, r.String(&m.DotGitFile))
		case "head":
			return fixedjson.Member(5, r.String(&m.Head))
		case "head_commit":
			return fixedjson.Member(6, r.String(&m.HeadCommit))
		case "time":
			return fixedjson.Member(7, r.Time(&m.Time))
		case "agentbox_version":
			return fixedjson.Member(8, r.String(&m.AgentboxVersion))
		}
		return -1
	})
}
