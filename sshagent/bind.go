package sshagent

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"math/big"
)

// extSessionBind is OpenSSH's extension (PROTOCOL.agent) by which ssh tells the
// agent which server it is authenticating to: the server's host key, the session
// identifier, the server's signature over it, and whether the agent is being
// forwarded there.
const extSessionBind = "session-bind@openssh.com"

// binding is what a verified session-bind told: a signature by HostKey over
// SessionID, which only that server's key exchange produces.
type binding struct {
	HostKey    []byte
	SessionID  []byte
	Forwarding bool
}

// parseSessionBind parses and verifies the body of a session-bind extension (after
// its name). A signature that does not verify is refused: without it, a client
// could bind any host key to any session.
func parseSessionBind(body []byte) (binding, error) {
	r := reader{b: body}
	b := binding{HostKey: r.string(), SessionID: r.string()}
	sig := r.string()
	fwd := r.byte()
	if err := r.done(); err != nil {
		return binding{}, err
	}
	b.Forwarding = fwd != 0
	if len(b.SessionID) == 0 || len(b.SessionID) > 128 {
		return binding{}, errors.New("session-bind: bad session identifier")
	}
	if err := verify(b.HostKey, b.SessionID, sig); err != nil {
		return binding{}, fmt.Errorf("session-bind: %w", err)
	}
	return b, nil
}

// verify checks an SSH signature blob (RFC 4253 section 6.6) by the public key
// blob over data; only the algorithms servers sign key exchanges with.
func verify(key, data, sigBlob []byte) error {
	kr := reader{b: key}
	ktype := string(kr.string())
	sr := reader{b: sigBlob}
	alg, sig := string(sr.string()), sr.string()
	if err := sr.done(); err != nil {
		return err
	}
	switch ktype {
	case "ssh-ed25519":
		pub := kr.string()
		if err := kr.done(); err != nil || len(pub) != ed25519.PublicKeySize || alg != ktype {
			return errors.New("bad ed25519 host key or signature")
		}
		if !ed25519.Verify(ed25519.PublicKey(pub), data, sig) {
			return errors.New("host key signature does not verify")
		}
		return nil
	case "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521":
		return verifyECDSA(ktype, &kr, alg, data, sig)
	case "ssh-rsa":
		return verifyRSA(&kr, alg, data, sig)
	}
	return fmt.Errorf("host key type %q is not supported", ktype)
}

func verifyECDSA(ktype string, kr *reader, alg string, data, sig []byte) error {
	curves := map[string]struct {
		c elliptic.Curve
		h crypto.Hash
	}{"nistp256": {elliptic.P256(), crypto.SHA256}, "nistp384": {elliptic.P384(), crypto.SHA384}, "nistp521": {elliptic.P521(), crypto.SHA512}}
	name, q := string(kr.string()), kr.string()
	c, ok := curves[name]
	if err := kr.done(); err != nil || !ok || alg != ktype || "ecdsa-sha2-"+name != ktype {
		return errors.New("bad ECDSA host key or signature")
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(c.c, q)
	if err != nil {
		return err
	}
	r := reader{b: sig}
	rb, sb := r.string(), r.string()
	if err := r.done(); err != nil {
		return err
	}
	h := c.h.New()
	h.Write(data)
	if !ecdsa.Verify(pub, h.Sum(nil), new(big.Int).SetBytes(rb), new(big.Int).SetBytes(sb)) {
		return errors.New("host key signature does not verify")
	}
	return nil
}

// maxRSABits and maxRSAExponent bound the RSA host keys verified: the cost of a
// verification grows with both (a 16384-bit modulus costs the launcher tens of
// milliseconds, from a message the sandbox sends at no cost), and OpenSSH makes
// 2048- to 4096-bit host keys with exponent 65537.
const (
	maxRSABits     = 8192
	maxRSAExponent = 65537
)

func verifyRSA(kr *reader, alg string, data, sig []byte) error {
	e, n := kr.string(), kr.string()
	if err := kr.done(); err != nil || len(e) == 0 || len(e) > 4 || len(n) > maxRSABits/8+1 {
		return fmt.Errorf("bad RSA host key, or one longer than %d bits", maxRSABits)
	}
	ev := new(big.Int).SetBytes(e)
	if ev.Int64() > maxRSAExponent {
		return fmt.Errorf("RSA host key exponent above %d", maxRSAExponent)
	}
	pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(ev.Int64())}
	var digest []byte
	var h crypto.Hash
	switch alg {
	case "rsa-sha2-256":
		s := sha256.Sum256(data)
		digest, h = s[:], crypto.SHA256
	case "rsa-sha2-512":
		s := sha512.Sum512(data)
		digest, h = s[:], crypto.SHA512
	default:
		return fmt.Errorf("RSA signature algorithm %q is not accepted", alg)
	}
	if pub.N.BitLen() < 2048 || pub.N.BitLen() > maxRSABits {
		return fmt.Errorf("RSA host key shorter than 2048 bits or longer than %d", maxRSABits)
	}
	if err := rsa.VerifyPKCS1v15(pub, h, digest, sig); err != nil {
		return errors.New("host key signature does not verify")
	}
	return nil
}

// userauth is what a signature request's data says when it is an SSH
// user-authentication request (RFC 4252 section 7).
type userauth struct {
	SessionID []byte
	Key       []byte
	HostKey   []byte // publickey-hostbound-v00@openssh.com only
}

// parseUserauth parses data as the blob a client signs to authenticate with a
// public key; ok is false for anything else (a commit signature, a challenge).
func parseUserauth(data []byte) (userauth, bool) {
	r := reader{b: data}
	u := userauth{SessionID: r.string()}
	if r.byte() != 50 { // SSH_MSG_USERAUTH_REQUEST
		return userauth{}, false
	}
	r.string() // user
	r.string() // service
	method := string(r.string())
	if r.byte() != 1 {
		return userauth{}, false
	}
	r.string() // algorithm
	u.Key = r.string()
	switch method {
	case "publickey":
	case "publickey-hostbound-v00@openssh.com":
		u.HostKey = r.string()
	default:
		return userauth{}, false
	}
	if r.done() != nil {
		return userauth{}, false
	}
	return u, true
}

// matches reports whether u authenticates key in the session b bound.
func (u userauth) matches(b *binding, key []byte) bool {
	return b != nil && bytes.Equal(u.SessionID, b.SessionID) && bytes.Equal(u.Key, key) &&
		(u.HostKey == nil || bytes.Equal(u.HostKey, b.HostKey))
}
