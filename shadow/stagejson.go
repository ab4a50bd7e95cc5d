package shadow

import (
	"strconv"

	"github.com/agentbox/agentbox/internal/fixedjson"
	"github.com/agentbox/agentbox/internal/treewalk"
)

// marshalStage writes a stage state as json.Marshal does with HTML escaping off
// (which both readers take, escapes or not). A session that staged anything
// writes one at its record's end, after the command: encoding/json would first
// build its encoders for stageState's four types by reflection, about half a
// millisecond of a launcher's CPU there. TestMarshalStageAsJSON compares the
// bytes with encoding/json's on states with every field filled.
func marshalStage(st *stageState) []byte {
	b := make([]byte, 0, 256+128*len(st.Recent))
	b = appendClock(fixedjson.Key(append(b, '{'), "clock"), &st.Clock)
	b = appendClock(fixedjson.Key(b, "added"), &st.Added)
	b = fixedjson.AppendBool(fixedjson.Key(b, "fine"), st.Fine)
	b = fixedjson.AppendString(fixedjson.Key(b, "tree"), st.Tree)
	b = append(fixedjson.Key(b, "index"), '{')
	b = strconv.AppendInt(fixedjson.Key(b, "Ino"), st.Index.Ino, 10)
	b = strconv.AppendInt(fixedjson.Key(b, "Size"), st.Index.Size, 10)
	b = strconv.AppendInt(fixedjson.Key(b, "MtimeNS"), st.Index.MtimeNS, 10)
	b = strconv.AppendInt(fixedjson.Key(b, "CtimeNS"), st.Index.CtimeNS, 10)
	b = append(b, '}')
	if st.Ignores != "" {
		b = fixedjson.AppendString(fixedjson.Key(b, "ignores"), st.Ignores)
	}
	if len(st.Recent) > 0 {
		b = append(fixedjson.Key(b, "recent"), '[')
		for i := range st.Recent {
			e := &st.Recent[i]
			b = append(fixedjson.Elem(b), '{')
			b = fixedjson.AppendString(fixedjson.Key(b, "path"), e.Path)
			b = strconv.AppendInt(fixedjson.Key(b, "ctime"), e.Ctime, 10)
			b = strconv.AppendUint(fixedjson.Key(b, "ino"), uint64(e.Ino), 10)
			b = strconv.AppendUint(fixedjson.Key(b, "mode"), uint64(e.Mode), 10)
			b = strconv.AppendUint(fixedjson.Key(b, "size"), uint64(e.Size), 10)
			b = fixedjson.AppendString(fixedjson.Key(b, "oid"), e.OID)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendClock(b []byte, c *treewalk.Clock) []byte {
	b = strconv.AppendInt(fixedjson.Key(append(b, '{'), "Real"), c.Real, 10)
	b = strconv.AppendInt(fixedjson.Key(b, "Boot"), c.Boot, 10)
	b = fixedjson.AppendString(fixedjson.Key(b, "BootID"), c.BootID)
	return append(b, '}')
}

// unmarshalStage reads a stage state as json.Unmarshal does. The state is read
// at every session's start; fixedjson's fast path spares a launcher encoding/json's
// reflection over its types, and what it does not take (a file some other version
// wrote differently, or a damaged one) is json.Unmarshal's to read or refuse.
func unmarshalStage(b []byte, st *stageState) error {
	return fixedjson.Unmarshal(b, st, readStageFast)
}

// readStageFast is fixedjson's fast path of a stage state; false: not taken.
func readStageFast(r *fixedjson.Reader, fast *stageState) bool {
	return r.Object(func(r *fixedjson.Reader, name []byte) int {
		switch string(name) {
		case "clock":
			return fixedjson.Member(0, readClock(r, &fast.Clock))
		case "added":
			return fixedjson.Member(1, readClock(r, &fast.Added))
		case "fine":
			return fixedjson.Member(2, r.Bool(&fast.Fine))
		case "tree":
			return fixedjson.Member(3, r.String(&fast.Tree))
		case "index":
			return fixedjson.Member(4, readFileID(r, &fast.Index))
		case "ignores":
			return fixedjson.Member(5, r.String(&fast.Ignores))
		case "recent":
			fast.Recent = []recentEntry{}
			return fixedjson.Member(6, r.Array(func(r *fixedjson.Reader) bool {
				var e recentEntry
				ok := readRecentEntry(r, &e)
				fast.Recent = append(fast.Recent, e)
				return ok
			}))
		}
		return -1
	})
}

func readClock(r *fixedjson.Reader, c *treewalk.Clock) bool {
	return r.Object(func(r *fixedjson.Reader, name []byte) int {
		switch string(name) {
		case "Real":
			return fixedjson.Member(0, r.Int64(&c.Real))
		case "Boot":
			return fixedjson.Member(1, r.Int64(&c.Boot))
		case "BootID":
			return fixedjson.Member(2, r.String(&c.BootID))
		}
		return -1
	})
}

func readFileID(r *fixedjson.Reader, id *fileID) bool {
	return r.Object(func(r *fixedjson.Reader, name []byte) int {
		switch string(name) {
		case "Ino":
			return fixedjson.Member(0, r.Int64(&id.Ino))
		case "Size":
			return fixedjson.Member(1, r.Int64(&id.Size))
		case "MtimeNS":
			return fixedjson.Member(2, r.Int64(&id.MtimeNS))
		case "CtimeNS":
			return fixedjson.Member(3, r.Int64(&id.CtimeNS))
		}
		return -1
	})
}

func readRecentEntry(r *fixedjson.Reader, e *recentEntry) bool {
	return r.Object(func(r *fixedjson.Reader, name []byte) int {
		switch string(name) {
		case "path":
			return fixedjson.Member(0, r.String(&e.Path))
		case "ctime":
			return fixedjson.Member(1, r.Int64(&e.Ctime))
		case "ino":
			return fixedjson.Member(2, r.Uint32(&e.Ino))
		case "mode":
			return fixedjson.Member(3, r.Uint32(&e.Mode))
		case "size":
			return fixedjson.Member(4, r.Uint32(&e.Size))
		case "oid":
			return fixedjson.Member(5, r.String(&e.OID))
		}
		return -1
	})
}
