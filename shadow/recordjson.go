package shadow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/agentbox/agentbox/internal/fixedjson"
)

// MarshalRecord encodes rec as indented JSON with a final newline, leaving '<', '>'
// and '&' readable: the bytes json.Encoder writes with SetEscapeHTML(false) and
// SetIndent("", "  ").
//
// Every session writes two records (its start and end commits), and encoding/json
// would build its encoders for Record's types by reflection in every launcher
// (about 1 ms of CPU here); the fields every session has are written by hand
// (appendRecord), the ones only some sessions fill (the proxy's refusals, the ssh
// agent's events, the forwardings) by encoding/json; json.Indent's validating
// scanner is replaced by fixedjson.AppendIndent. TestMarshalRecordAsJSON
// compares the bytes with json.Encoder's on records with every field filled.
func MarshalRecord(rec Record) ([]byte, error) { return appendRecordJSON(nil, &rec) }

// recordJSONLen is a typical record's compact length: room enough that its
// encoding grows no buffer.
const recordJSONLen = 4096

// appendRecordJSON appends what MarshalRecord returns to dst.
func appendRecordJSON(dst []byte, rec *Record) ([]byte, error) {
	compact, err := appendRecord(make([]byte, 0, recordJSONLen), rec)
	if err != nil {
		// A time outside the years 0–9999: encoding/json words the error.
		b, err := marshalRecordReflect(*rec)
		if err != nil {
			return nil, err
		}
		return append(dst, b...), nil
	}
	dst = slices.Grow(dst, 2*len(compact)+1)
	return append(fixedjson.AppendIndent(dst, compact), '\n'), nil
}

// marshalRecordReflect is MarshalRecord by encoding/json.
func marshalRecordReflect(rec Record) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rec); err != nil {
		return nil, fmt.Errorf("shadow: encode record: %w", err)
	}
	return b.Bytes(), nil
}

// appendRecord appends rec as compact JSON, field by field in Record's order with
// its tags' omitempty and omitzero.
func appendRecord(b []byte, rec *Record) ([]byte, error) {
	var err error
	b = append(b, '{')
	b = fixedjson.AppendString(fixedjson.Key(b, "id"), rec.ID)
	b = fixedjson.AppendString(fixedjson.Key(b, "repo"), rec.Repo)
	b = fixedjson.AppendStrings(fixedjson.Key(b, "command"), rec.Command)
	b = fixedjson.AppendStrings(fixedjson.Key(b, "args"), rec.Args)
	b = fixedjson.AppendString(fixedjson.Key(b, "backend"), rec.Backend)
	b = optString(b, "backend_version", rec.BackendVersion)
	b = appendPolicy(fixedjson.Key(b, "policy"), &rec.Policy)
	if b, err = fixedjson.AppendTime(fixedjson.Key(b, "start"), rec.Start); err != nil {
		return nil, err
	}
	if !rec.End.IsZero() {
		if b, err = fixedjson.AppendTime(fixedjson.Key(b, "end"), rec.End); err != nil {
			return nil, err
		}
	}
	b = strconv.AppendInt(fixedjson.Key(b, "exit_status"), int64(rec.ExitStatus), 10)
	b = optString(b, "error", rec.Error)
	b = optInt(b, "killed_left_running", int64(rec.KilledLeft))
	if len(rec.Phases) > 0 {
		b = append(fixedjson.Key(b, "phases"), '[')
		for _, p := range rec.Phases {
			b = append(fixedjson.Elem(b), '{')
			b = fixedjson.AppendString(fixedjson.Key(b, "name"), p.Name)
			b = strconv.AppendInt(fixedjson.Key(b, "ns"), p.NS, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = optString(b, "snapshot_zip", rec.Snapshot)
	b = optStrings(b, "audit_findings", rec.AuditFindings)
	b = append(fixedjson.Key(b, "files"), '{')
	b = strconv.AppendInt(fixedjson.Key(b, "added"), int64(rec.Files.Added), 10)
	b = strconv.AppendInt(fixedjson.Key(b, "changed"), int64(rec.Files.Changed), 10)
	b = strconv.AppendInt(fixedjson.Key(b, "removed"), int64(rec.Files.Removed), 10)
	b = append(b, '}')
	if len(rec.NotRecorded) > 0 {
		b = append(fixedjson.Key(b, "not_recorded"), '[')
		for _, s := range rec.NotRecorded {
			b = append(fixedjson.Elem(b), '{')
			b = fixedjson.AppendString(fixedjson.Key(b, "path"), s.Path)
			b = fixedjson.AppendString(fixedjson.Key(b, "reason"), s.Reason)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = optInt(b, "not_recorded_count", int64(rec.NotRecordedCount))
	b = optStrings(b, "ignored", rec.Ignored)
	b = optInt(b, "ignored_count", int64(rec.IgnoredCount))
	b = optInt(b, "read_bytes", rec.ReadBytes)
	if len(rec.Perms) > 0 {
		b = append(fixedjson.Key(b, "perms"), '[')
		for _, p := range rec.Perms {
			b = append(fixedjson.Elem(b), '{')
			b = fixedjson.AppendString(fixedjson.Key(b, "path"), p.Path)
			b = strconv.AppendUint(fixedjson.Key(b, "from"), uint64(p.From), 10)
			b = strconv.AppendUint(fixedjson.Key(b, "to"), uint64(p.To), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = optBool(b, "perms_known", rec.PermsKnown)
	b = appendDirChanges(b, "dirs_made", rec.DirsMade)
	b = appendDirChanges(b, "dirs_gone", rec.DirsGone)
	b = optBool(b, "dirs_known", rec.DirsKnown)
	// The fields only some sessions fill: encoding/json, paid for by those.
	if len(rec.NetRefusals) > 0 {
		if b, err = appendReflect(fixedjson.Key(b, "net_refusals"), rec.NetRefusals); err != nil {
			return nil, err
		}
	}
	if len(rec.SSHAgent) > 0 {
		if b, err = appendReflect(fixedjson.Key(b, "ssh_agent"), rec.SSHAgent); err != nil {
			return nil, err
		}
	}
	if u := rec.Usage; u != nil {
		b = append(fixedjson.Key(b, "usage"), '{')
		b = fixedjson.AppendString(fixedjson.Key(b, "source"), u.Source)
		b = strconv.AppendInt(fixedjson.Key(b, "cpu_usec"), u.CPUUsec, 10)
		b = strconv.AppendInt(fixedjson.Key(b, "peak_memory"), u.PeakMemory, 10)
		b = strconv.AppendInt(fixedjson.Key(b, "peak_tasks"), u.PeakTasks, 10)
		b = optString(b, "limit", u.Limit)
		b = optInt(b, "throttled", u.Throttled)
		b = append(b, '}')
	}
	if len(rec.Ports) > 0 {
		if b, err = appendReflect(fixedjson.Key(b, "ports"), rec.Ports); err != nil {
			return nil, err
		}
	}
	b = fixedjson.AppendBool(fixedjson.Key(b, "complete"), rec.Complete)
	b = optStrings(b, "notes", rec.Notes)
	b = optInt(b, "launcher_pid", int64(rec.LauncherPID))
	b = strconv.AppendInt(fixedjson.Key(b, "uid"), int64(rec.UID), 10)
	b = optString(b, "host", rec.Host)
	b = optString(b, "start_commit", rec.StartCommit)
	b = optString(b, "end_commit", rec.EndCommit)
	return append(b, '}'), nil
}

func appendPolicy(b []byte, p *Policy) []byte {
	b = append(b, '{')
	b = fixedjson.AppendString(fixedjson.Key(b, "repo"), p.Repo)
	b = optString(b, "home", p.Home)
	b = fixedjson.AppendString(fixedjson.Key(b, "workdir"), p.Workdir)
	b = fixedjson.AppendBool(fixedjson.Key(b, "offline"), p.Offline)
	b = fixedjson.AppendBool(fixedjson.Key(b, "disk_tmp"), p.DiskTmp)
	b = fixedjson.AppendString(fixedjson.Key(b, "backend"), p.Backend)
	b = fixedjson.AppendString(fixedjson.Key(b, "state_dir"), p.StateDir)
	b = optString(b, "cache_dir", p.CacheDir)
	b = optStrings(b, "allow_net", p.AllowNet)
	b = optBool(b, "ssh_agent", p.SSHAgent)
	b = optStrings(b, "ssh_keys", p.SSHKeys)
	b = optStrings(b, "host_ports", p.HostPorts)
	b = optStrings(b, "publish", p.Publish)
	b = optInt(b, "memory", p.Memory)
	b = optInt(b, "pids", p.Pids)
	b = optInt(b, "milli_cpus", p.MilliCPUs)
	return append(b, '}')
}

func appendDirChanges(b []byte, name string, dirs []DirChange) []byte {
	if len(dirs) == 0 {
		return b
	}
	b = append(fixedjson.Key(b, name), '[')
	for _, d := range dirs {
		b = append(fixedjson.Elem(b), '{')
		b = fixedjson.AppendString(fixedjson.Key(b, "path"), d.Path)
		if d.Ino != 0 {
			b = strconv.AppendUint(fixedjson.Key(b, "ino"), uint64(d.Ino), 10)
		}
		if d.Perm != 0 {
			b = strconv.AppendUint(fixedjson.Key(b, "perm"), uint64(d.Perm), 10)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendReflect appends v's compact JSON by encoding/json, HTML escaping off.
func appendReflect(b []byte, v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...), nil
}

func optString(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return fixedjson.AppendString(fixedjson.Key(b, name), v)
}

func optStrings(b []byte, name string, v []string) []byte {
	if len(v) == 0 {
		return b
	}
	return fixedjson.AppendStrings(fixedjson.Key(b, name), v)
}

func optInt(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(fixedjson.Key(b, name), v, 10)
}

func optBool(b []byte, name string, v bool) []byte {
	if !v {
		return b
	}
	return fixedjson.AppendBool(fixedjson.Key(b, name), v)
}
