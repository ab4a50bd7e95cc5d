package sshagent

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/internal/safepath"
)

// Identity is one key an agent lists: its public key blob (RFC 4253 section 6.6)
// and comment.
type Identity struct {
	Blob    []byte
	Comment string
}

// Fingerprint is OpenSSH's SHA256 fingerprint of a public key blob, as
// `ssh-add -l` prints it.
func Fingerprint(blob []byte) string {
	sum := sha256.Sum256(blob)
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// keyType is the algorithm name a blob starts with ("" when it has none).
func keyType(blob []byte) string {
	r := reader{b: blob}
	t := r.string()
	if r.err != nil {
		return ""
	}
	return string(t)
}

// parseIdentities parses an SSH_AGENT_IDENTITIES_ANSWER.
func parseIdentities(msg []byte) ([]Identity, error) {
	r := reader{b: msg}
	if t := r.byte(); t != msgIdentitiesAnswer {
		return nil, fmt.Errorf("agent answered with message %d, not a list of keys", t)
	}
	n := r.uint32()
	if r.err == nil && uint64(n) > uint64(len(r.b))/8 {
		return nil, errShort
	}
	ids := make([]Identity, 0, n)
	for range n {
		blob, comment := r.string(), r.string()
		if r.err != nil {
			break
		}
		ids = append(ids, Identity{Blob: blob, Comment: string(comment)})
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return ids, nil
}

func marshalIdentities(ids []Identity) []byte {
	b := []byte{msgIdentitiesAnswer, 0, 0, 0, 0}
	b[1], b[2], b[3], b[4] = byte(len(ids)>>24), byte(len(ids)>>16), byte(len(ids)>>8), byte(len(ids))
	for _, id := range ids {
		b = appendString(b, id.Blob)
		b = appendString(b, []byte(id.Comment))
	}
	return b
}

// errNotRegular is a key path that leads to anything but a regular file.
var errNotRegular = errors.New("is not a regular file (a public key file is one)")

// Selector names keys (--ssh-key): a fingerprint "SHA256:…", the path of a public
// key file (one that contains a '/'; a private key's path stands for its ".pub"),
// or else a key comment, matched exactly.
type Selector struct {
	Spec string // as the user gave it
	fp   string // the fingerprint, for a fingerprint or a file
}

// ParseSelector parses one --ssh-key value; a file is read now, so that a missing
// or unreadable one stops the launch. Errors say why, not which value.
func ParseSelector(spec string) (Selector, error) {
	switch {
	case spec == "":
		return Selector{}, fmt.Errorf("empty key name")
	case strings.HasPrefix(spec, "SHA256:"):
		return Selector{Spec: spec, fp: spec}, nil
	case strings.Contains(spec, "/"):
		blob, err := readPublicKeyFile(spec)
		if err != nil {
			return Selector{}, err
		}
		return Selector{Spec: spec, fp: Fingerprint(blob)}, nil
	}
	return Selector{Spec: spec}, nil
}

// readPublicKeyFile reads an OpenSSH public key line ("TYPE BASE64 [COMMENT]")
// from path, or from path+".pub" when path is not one (a private key).
func readPublicKeyFile(path string) ([]byte, error) {
	blob, err := parsePublicKeyFile(path)
	if err == nil {
		return blob, nil
	}
	if b2, err2 := parsePublicKeyFile(path + ".pub"); err2 == nil {
		return b2, nil
	}
	return nil, err
}

// parsePublicKeyFile reads the key line of path. The file may lie where a session
// writes (a kept ~/.ssh, the repository) and is read at every later launch, so it is
// opened only once it is known to be a regular file (safepath.OpenRegularFollow): a
// FIFO planted there would hang the launch, and a link to a device would have the
// launcher open the device (a watchdog, armed by the open; the operator's terminal).
func parsePublicKeyFile(path string) ([]byte, error) {
	f, err := safepath.OpenRegularFollow(path)
	if errors.Is(err, safepath.ErrNotRegular) {
		return nil, errNotRegular
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 16<<10)
	n, _ := f.Read(buf)
	fields := strings.Fields(string(buf[:n]))
	if len(fields) < 2 {
		return nil, fmt.Errorf("is not an OpenSSH public key file")
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil || keyType(blob) != fields[0] {
		return nil, fmt.Errorf("is not an OpenSSH public key file")
	}
	return blob, nil
}

func (s Selector) matches(id Identity) bool {
	if s.fp != "" {
		return Fingerprint(id.Blob) == s.fp
	}
	return id.Comment == s.Spec
}

// Allowed is the set of keys the sandbox may see and use (nil: every key).
type Allowed struct {
	sels []Selector
}

// NewAllowed returns the set for sels; none selects every key.
func NewAllowed(sels []Selector) *Allowed { return &Allowed{sels: sels} }

// Has reports whether the key blob may be listed and used; ids are the agent's
// keys, whose comments a comment selector matches.
func (a *Allowed) Has(blob []byte, ids []Identity) bool {
	if len(a.sels) == 0 {
		return true
	}
	for _, s := range a.sels {
		if s.fp != "" && s.fp == Fingerprint(blob) {
			return true
		}
		if s.fp == "" {
			for _, id := range ids {
				if bytes.Equal(id.Blob, blob) && s.matches(id) {
					return true
				}
			}
		}
	}
	return false
}

// Check returns an error naming the first selector that matches none of ids: a
// --ssh-key that names nothing is a mistake the user wants to hear about.
func (a *Allowed) Check(ids []Identity) error {
	for _, s := range a.sels {
		found := false
		for _, id := range ids {
			found = found || s.matches(id)
		}
		if !found {
			return fmt.Errorf("--ssh-key %q: matches no key of the agent at $SSH_AUTH_SOCK (ssh-add -l lists them by comment and fingerprint)", s.Spec)
		}
	}
	return nil
}
