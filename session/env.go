package session

import (
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/policy"
)

// Environment variables the command finds set: it runs inside agentbox, and in
// which session (the shadow record's id, as `agentbox show` takes it).
const (
	EnvInside  = "AGENTBOX"
	EnvSession = "AGENTBOX_SESSION"
)

// sessionEnv is the command's environment: base with the markers set (it runs inside
// agentbox, in session id), and without SSH_AUTH_SOCK unless its socket is handed in
// (--allow-socket): inside it would name nothing, or, in HOME, an agent the user did
// not hand in. The launcher's own environment is left as it is.
func sessionEnv(base []string, p *policy.Policy, id string) []string {
	handed := false
	if sock := getenv(base, "SSH_AUTH_SOCK"); sock != "" {
		for _, s := range p.Sockets {
			if c, err := filepath.EvalSymlinks(sock); err == nil && c == s.Path {
				handed = true
			}
		}
	}
	env := make([]string, 0, len(base)+2)
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if name == EnvInside || name == EnvSession || (name == "SSH_AUTH_SOCK" && !handed) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, EnvInside+"=1", EnvSession+"="+id)
}

// getenv is the value of key in env, the last one winning; "" when unset.
func getenv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}
