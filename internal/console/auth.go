// Package console is the web console's sign-in and page (docs/console.md): a one-time code,
// printed by `nexus serve --listen` and `nexus console`, becomes an HttpOnly, SameSite=Strict
// cookie, and the page (bundled from web/ with esbuild and embedded) talks to the gateway's API
// with that cookie from the gateway's own origin.
package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"sync"
	"time"
)

// CookieName is the console's session cookie.
const CookieName = "nexus_console"

// Limits on what the sign-in keeps, so that minting codes cannot grow the gateway's memory.
const (
	maxCodes    = 64
	maxSessions = 256
)

// ErrInvalidCode is a sign-in code that is unknown, expired or already used: the three are
// not told apart.
var ErrInvalidCode = errors.New("the sign-in code is invalid, expired or already used")

// Options configure an Auth.
type Options struct {
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Rand is the source of codes and cookies; default crypto/rand.
	Rand io.Reader
	// CodeTTL is how long a sign-in code may be used; default 10 minutes.
	CodeTTL time.Duration
	// SessionTTL is how long a signed-in browser stays signed in; default 24 hours.
	SessionTTL time.Duration
}

// Auth issues one-time sign-in codes and the browser sessions they become. It keeps only the
// SHA-256 of each secret: a lookup compares digests, never the secret itself, and a memory
// dump shows no usable secret. Nothing is kept on disk: a restarted gateway asks for a new
// sign-in.
type Auth struct {
	opt      Options
	mu       sync.Mutex
	codes    map[[32]byte]time.Time // digest → expiry
	sessions map[[32]byte]time.Time
	shares   map[[32]byte]share
	base     string // the console's URL, once the gateway listens
}

// share is a read-only view of one live session: a link a signed-in user hands to someone
// who may watch it but not type. It belongs to the sign-in that made it (owner, its cookie's
// digest) and ends with it: at its sign-out, or when that sign-in expires.
type share struct {
	session string
	expires time.Time
	owner   [32]byte
	revoked chan struct{} // closed when the share ends before its time
}

// maxShares bounds the share links kept.
const maxShares = 256

// NewAuth returns an Auth with no code and no session.
func NewAuth(opt Options) *Auth {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Rand == nil {
		opt.Rand = rand.Reader
	}
	if opt.CodeTTL <= 0 {
		opt.CodeTTL = 10 * time.Minute
	}
	if opt.SessionTTL <= 0 {
		opt.SessionTTL = 24 * time.Hour
	}
	return &Auth{opt: opt, codes: map[[32]byte]time.Time{}, sessions: map[[32]byte]time.Time{}, shares: map[[32]byte]share{}}
}

// SetBase records the gateway's own origin (http://host:port), which sign-in URLs start with.
func (a *Auth) SetBase(base string) {
	a.mu.Lock()
	a.base = base
	a.mu.Unlock()
}

// Base is the gateway's origin, "" before it listens.
func (a *Auth) Base() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.base
}

func (a *Auth) secret() (string, [32]byte, error) {
	b := make([]byte, 32)
	if _, err := io.ReadFull(a.opt.Rand, b); err != nil {
		return "", [32]byte{}, err
	}
	s := base64.RawURLEncoding.EncodeToString(b)
	return s, sha256.Sum256([]byte(s)), nil
}

// prune drops what has expired and, past limit, the entries closest to expiring.
func prune[T any](m map[[32]byte]T, now time.Time, limit int, expiry func(T) time.Time) {
	for k, v := range m {
		if !now.Before(expiry(v)) {
			delete(m, k)
		}
	}
	for len(m) >= limit {
		var oldest [32]byte
		var at time.Time
		for k, v := range m {
			if exp := expiry(v); at.IsZero() || exp.Before(at) {
				oldest, at = k, exp
			}
		}
		delete(m, oldest)
	}
}

func itself(t time.Time) time.Time { return t }

// NewCode issues a one-time sign-in code and returns it with its expiry and the sign-in URL
// ("" before SetBase).
func (a *Auth) NewCode() (code, url string, expires time.Time, err error) {
	code, digest, err := a.secret()
	if err != nil {
		return "", "", time.Time{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.opt.Now()
	prune(a.codes, now, maxCodes, itself)
	expires = now.Add(a.opt.CodeTTL)
	a.codes[digest] = expires
	if a.base != "" {
		url = a.base + SignInPath + "?code=" + code
	}
	return code, url, expires, nil
}

// Redeem uses up a sign-in code and returns a new browser session's cookie value.
func (a *Auth) Redeem(code string) (string, error) {
	digest := sha256.Sum256([]byte(code))
	a.mu.Lock()
	exp, ok := a.codes[digest]
	delete(a.codes, digest)
	now := a.opt.Now()
	a.mu.Unlock()
	if !ok || !now.Before(exp) {
		return "", ErrInvalidCode
	}
	cookie, sd, err := a.secret()
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	prune(a.sessions, now, maxSessions, itself)
	a.sessions[sd] = now.Add(a.opt.SessionTTL)
	return cookie, nil
}

// Valid reports whether cookie is a signed-in browser session's.
func (a *Auth) Valid(cookie string) bool {
	if cookie == "" {
		return false
	}
	digest := sha256.Sum256([]byte(cookie))
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.sessions[digest]
	return ok && a.opt.Now().Before(exp)
}

// SignOut ends a browser session and the share links it made: their viewers' cookies stop
// working, and their open streams end (ShareRevoked).
func (a *Auth) SignOut(cookie string) {
	digest := sha256.Sum256([]byte(cookie))
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sessions, digest)
	for k, sh := range a.shares {
		if sh.owner == digest {
			close(sh.revoked)
			delete(a.shares, k)
		}
	}
}

// ShareTTL is how long a share link lets someone watch.
const ShareTTL = 24 * time.Hour

// ErrSignedOut is a share asked for by a browser that is not signed in.
var ErrSignedOut = errors.New("not signed in")

// NewShare issues a read-only share token for the live session id on behalf of the signed-in
// browser whose cookie is owner, and the link that uses it ("" before SetBase). Whoever has
// the link may watch that session, not type into it, and nothing else, until ShareTTL passes
// or the owner's sign-in ends, whichever comes first.
func (a *Auth) NewShare(owner, id string) (token, url string, expires time.Time, err error) {
	token, digest, err := a.secret()
	if err != nil {
		return "", "", time.Time{}, err
	}
	od := sha256.Sum256([]byte(owner))
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.opt.Now()
	signedIn, ok := a.sessions[od]
	if !ok || !now.Before(signedIn) {
		return "", "", time.Time{}, ErrSignedOut
	}
	prune(a.shares, now, maxShares, func(sh share) time.Time { return sh.expires })
	expires = now.Add(ShareTTL)
	if signedIn.Before(expires) {
		expires = signedIn
	}
	a.shares[digest] = share{session: id, expires: expires, owner: od, revoked: make(chan struct{})}
	if a.base != "" {
		url = a.base + SharePath + "?token=" + token
	}
	return token, url, expires, nil
}

// Shared returns the session a share token lets its holder watch; false for an unknown,
// expired or revoked token.
func (a *Auth) Shared(token string) (string, bool) {
	id, _, ok := a.share(token)
	return id, ok
}

// share looks a token up: its session and the channel closed when it is revoked.
func (a *Auth) share(token string) (string, <-chan struct{}, bool) {
	if token == "" {
		return "", nil, false
	}
	digest := sha256.Sum256([]byte(token))
	a.mu.Lock()
	defer a.mu.Unlock()
	sh, ok := a.shares[digest]
	if _, owned := a.sessions[sh.owner]; !ok || !owned || !a.opt.Now().Before(sh.expires) {
		return "", nil, false // unknown, its sign-in dropped for a newer one, or expired
	}
	return sh.session, sh.revoked, true
}
