package agentcfg

import (
	"encoding/base64"
	"maps"
	"slices"
	"strings"
)

// A login file (Claude Code's .credentials.json, Codex's auth.json) is rewritten by
// its agent at every refresh, so a change alone says nothing; what must not change
// is the account it signs in as: a planted login sends every later session of the
// operator, in agentbox or not, to another account. A login is split into its
// account — everything but what a refresh rewrites — and its two tokens.
type login struct {
	present bool   // the file holds a login at all
	account string // canonical JSON of what must stay the same
	// stamped: the account is named by an id (Claude Code's accountUuid, Codex's
	// tokens' claims) or a key, not only by opaque tokens.
	stamped bool
	access  string
	refresh string
	// gateway: canonical JSON of where and as whom Claude Code's sign-ins to an
	// organization's gateway send its prompts (gatewayLogin), "" when none.
	gateway string
	// grants are Claude Code's other sign-ins of the account (claudeGrants), by
	// the file's key.
	grants map[string]login
}

// claudeVolatile are the fields of Claude Code's claudeAiOauth that a refresh, a
// profile fetch or a dead token rewrites (2.1.332: its token refresh, its
// subscription stamp, its dead-token clear); every other field, the account and
// organization ids and the OAuth client first, must stay.
func claudeVolatile(k string) bool {
	switch k {
	case "accessToken", "refreshToken", "expiresAt", "refreshTokenExpiresAt", "scopes",
		"subscriptionType", "subscriptionTypeSource", "subscriptionTypeVerifiedAt",
		"rateLimitTier", "loginEnded":
		return true
	}
	return false
}

// readLogin reads the login in a file of format f; ok is false when f is not a login
// format or data is not a JSON object.
func readLogin(f format, data []byte) (l login, ok bool) {
	if f != claudeLogin && f != codexLogin {
		return login{}, false
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return login{}, true
	}
	v, ok := decodeJSON(data)
	doc, isObj := v.(map[string]any)
	if !ok || !isObj {
		return login{}, false
	}
	if f == claudeLogin {
		l := claudeAccount(doc)
		l.gateway = gatewayLogin(doc)
		l.grants = claudeGrants(doc)
		return l, true
	}
	return codexAccount(doc), true
}

// gatewayLogins are the fields of Claude Code's sign-ins to an organization's
// gateway (2.1.332) that name where its prompts go and as whom, by the file's key;
// nil keeps the whole value. enterpriseGateway's url is where every prompt goes
// under CLAUDE_CODE_USE_GATEWAY, trusted by the certificate gatewayTrust holds for
// its origin; hybridOauth is the organization sign-in, and hybridGatewayAuth and
// hybridGatewayIdp the gateway it binds. Their refreshes rewrite only the rest
// (tokens, JWTs, expiries, the e-mail address).
var gatewayLogins = []gatewayKey{
	{"enterpriseGateway", []string{"url"}},
	{"gatewayTrust", nil},
	{"hybridOauth", []string{"accountUuid", "organizationUuid"}},
	{"hybridGatewayAuth", []string{"url", "organizationUuid"}},
	{"hybridGatewayIdp", []string{"binding", "accountUuid"}},
}

type gatewayKey struct {
	key    string
	fields []string
}

// gatewayLogin is canonical JSON of the gatewayLogins fields doc holds, "" when
// it holds none of those keys.
func gatewayLogin(doc map[string]any) string {
	out := map[string]any{}
	for _, g := range gatewayLogins {
		v, ok := doc[g.key]
		if !ok {
			continue
		}
		if o, isObj := v.(map[string]any); isObj && g.fields != nil {
			kept := map[string]any{}
			for _, k := range g.fields {
				kept[k] = o[k]
			}
			v = kept
		}
		out[g.key] = v
	}
	if len(out) == 0 {
		return ""
	}
	return mustJSON(out)
}

// accountGrants are the keys of Claude Code's credentials that 2.1.332 keeps for
// its login's own account ("accountGrant" in its credential store's merge): the
// account's sign-ins to Claude Design, to its chat history and to cloud sessions,
// each a token pair of its own that every later session uses as it finds it.
// Beside them, the store counts a key it does not know that names an
// organizationUuid and an accountUuid as an organization's sign-in; so does the
// audit.
var accountGrants = []string{"designOauth", "chatHistoryOauth", "cloudSessionsOauth"}

// claudeGrants reads doc's account grants: each one's account is every field but
// its tokens, expiry, scopes and e-mail address (what a refresh or a profile fetch
// rewrites: 2.1.332 keeps clientId, organizationUuid, and a standalone sign-in's
// accountEmail and organizationName across a refresh). Claude Design's names no
// more than its OAuth client.
func claudeGrants(doc map[string]any) map[string]login {
	out := map[string]login{}
	for k, v := range doc {
		o, ok := v.(map[string]any)
		switch {
		case !ok || k == "claudeAiOauth" || slices.ContainsFunc(gatewayLogins, func(g gatewayKey) bool { return g.key == k }):
			continue
		case !slices.Contains(accountGrants, k) && (str(o["accountUuid"]) == "" || str(o["organizationUuid"]) == ""):
			continue
		}
		g := login{present: true, access: str(o["accessToken"]), refresh: str(o["refreshToken"])}
		acct := map[string]any{}
		for f, x := range o {
			if !claudeVolatile(f) && f != "emailAddress" {
				acct[f] = x
			}
		}
		g.account = mustJSON(acct)
		out[k] = g
	}
	return out
}

// grantChange says how cur's account grants differ from base's in a way no refresh
// explains: one new since the launch, one of another account, a refresh token
// changed alone. A grant removed is not: it sends nothing anywhere (2.1.332 clears
// one itself when its refresh lacks its scopes).
func grantChange(base, cur map[string]login, baseExists bool) string {
	keys := slices.Sorted(maps.Keys(cur))
	for _, k := range keys {
		g := cur[k]
		old, had := base[k]
		switch {
		case !baseExists || !had:
			return k + ": new: a sign-in that was not there at launch"
		case old.account != g.account:
			return k + ": the sign-in of another account"
		case old.refresh != g.refresh && old.access == g.access:
			return k + ": the refresh token changed without the access token: not a refresh"
		}
	}
	return ""
}

// claudeAccount: Claude Code's login is claudeAiOauth; the rest of the file (MCP
// servers' tokens, other services' grants) is audited as state.
func claudeAccount(doc map[string]any) login {
	o, ok := doc["claudeAiOauth"].(map[string]any)
	if !ok {
		return login{}
	}
	l := login{present: true, access: str(o["accessToken"]), refresh: str(o["refreshToken"])}
	acct := map[string]any{}
	for k, v := range o {
		if !claudeVolatile(k) {
			acct[k] = v
		}
	}
	l.account = mustJSON(acct)
	l.stamped = str(o["accountUuid"]) != ""
	return l
}

// codexAccount: every field of auth.json but last_refresh, with the tokens
// replaced by the account their claims name (tokenAccount); the refresh token
// stays out. An API key, an account_id, an auth mode or a field agentbox does not
// know counts as it is.
func codexAccount(doc map[string]any) login {
	acct := map[string]any{}
	var l login
	for k, v := range doc {
		if k != "last_refresh" {
			acct[k] = v
			l.present = l.present || v != nil
		}
	}
	t, ok := doc["tokens"].(map[string]any)
	l.stamped = !ok // an API key is its own account
	if ok {
		tt := map[string]any{}
		for k, v := range t {
			switch k {
			case "refresh_token":
				l.refresh = str(v)
			case "access_token", "id_token":
				claims, named := tokenAccount(v)
				tt[k] = claims
				l.stamped = l.stamped || named
				if k == "access_token" {
					l.access = str(v)
				}
			default:
				tt[k] = v
			}
		}
		acct["tokens"] = tt
	}
	l.account = mustJSON(acct)
	return l
}

// tokenAccount is the account a JWT names, decoded without verifying it (no
// network): its issuer, subject and audience, and the ChatGPT account and user ids
// of OpenAI's auth claim; named says it named one. A token that is not a JWT with
// such a claim is kept as it is, so that any change of it counts (fail closed).
func tokenAccount(v any) (any, bool) {
	s, ok := v.(string)
	parts := strings.Split(s, ".")
	if !ok || len(parts) != 3 {
		return v, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return v, false
	}
	c, ok := decodeJSON(payload)
	claims, isObj := c.(map[string]any)
	if !ok || !isObj {
		return v, false
	}
	out := map[string]any{}
	for _, k := range []string{"iss", "sub", "aud"} {
		if x, ok := claims[k]; ok {
			out[k] = x
		}
	}
	named := str(claims["sub"]) != ""
	if auth, ok := claims["https://api.openai.com/auth"].(map[string]any); ok {
		for _, k := range []string{"chatgpt_account_id", "chatgpt_user_id", "user_id", "chatgpt_account_user_id"} {
			if x, ok := auth[k]; ok {
				out[k] = x
				named = named || str(x) != ""
			}
		}
	}
	if !named {
		return v, false
	}
	return out, true
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// loginChange says how the login in cur differs from the one in base in a way a
// refresh cannot explain; "" when it does not. Both are regular files read in a
// login format (a file that is not JSON is put back whole before this).
func loginChange(f format, base, cur []byte, baseExists bool) string {
	if f != claudeLogin && f != codexLogin {
		return ""
	}
	// JSON that is no object holds no login: one there takes the login away.
	b, _ := readLogin(f, base)
	c, _ := readLogin(f, cur)
	if b.gateway != c.gateway {
		return "the gateway its prompts go to, or its organization sign-in, changed"
	}
	if what := grantChange(b.grants, c.grants, baseExists); what != "" {
		return what
	}
	switch {
	case !baseExists || !b.present:
		if c.present {
			return "new: a login that was not there at launch"
		}
		return ""
	case !c.present:
		return "the login removed"
	case b.account != c.account:
		if !b.stamped {
			return "the login changed, and nothing in it at launch named its account"
		}
		return "the login of another account"
	case b.refresh != c.refresh && b.access == c.access:
		return "the refresh token changed without the access token: not a refresh"
	case !b.stamped && (b.refresh != c.refresh || b.access != c.access):
		return "the login's tokens changed, and nothing in it at launch named its account"
	}
	return ""
}
