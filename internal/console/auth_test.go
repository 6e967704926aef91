package console_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/console"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestAuth: a code works once and within its TTL; a session lasts its TTL; minting many codes
// keeps a bounded number (the newest work), and no code or cookie repeats.
func TestAuth(t *testing.T) {
	c := &clock{time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)}
	a := console.NewAuth(console.Options{Now: c.now, CodeTTL: time.Minute, SessionTTL: time.Hour})
	if _, url, _, _ := a.NewCode(); url != "" {
		t.Fatalf("a URL before the gateway listens: %q", url)
	}
	a.SetBase("http://127.0.0.1:7777")
	code, url, exp, err := a.NewCode()
	if err != nil || url != "http://127.0.0.1:7777/console/signin?code="+code || !exp.Equal(c.t.Add(time.Minute)) || len(code) != 43 {
		t.Fatalf("code %q url %q exp %v err %v", code, url, exp, err)
	}
	cookie, err := a.Redeem(code)
	if err != nil || !a.Valid(cookie) || a.Valid("") || a.Valid(code) {
		t.Fatalf("redeem: %q %v", cookie, err)
	}
	if _, err := a.Redeem(code); !errors.Is(err, console.ErrInvalidCode) {
		t.Fatalf("a second redeem: %v", err)
	}
	late, _, _, _ := a.NewCode()
	c.t = c.t.Add(time.Minute)
	if _, err := a.Redeem(late); !errors.Is(err, console.ErrInvalidCode) {
		t.Fatalf("an expired code: %v", err)
	}
	c.t = c.t.Add(time.Hour)
	if a.Valid(cookie) {
		t.Fatal("a session past its TTL")
	}
	seen := map[string]bool{}
	var codes []string
	for range 1000 {
		c.t = c.t.Add(time.Millisecond) // the oldest expires first, and is dropped first
		code, _, _, err := a.NewCode()
		if err != nil || seen[code] {
			t.Fatalf("code %q repeated or %v", code, err)
		}
		seen[code] = true
		codes = append(codes, code)
	}
	if _, err := a.Redeem(codes[len(codes)-1]); err != nil {
		t.Fatalf("the newest code: %v", err)
	}
	if _, err := a.Redeem(codes[0]); !errors.Is(err, console.ErrInvalidCode) {
		t.Fatalf("the oldest of 1000 codes is still kept: %v", err)
	}
}

// TestShareBelongsToItsSignIn: only a signed-in browser makes a share link; the link ends
// with that sign-in (at its sign-out, or when it expires), not only after its own day.
func TestShareBelongsToItsSignIn(t *testing.T) {
	c := &clock{time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)}
	a := console.NewAuth(console.Options{Now: c.now, SessionTTL: time.Hour})
	signIn := func() string {
		code, _, _, _ := a.NewCode()
		cookie, err := a.Redeem(code)
		if err != nil {
			t.Fatal(err)
		}
		return cookie
	}
	if _, _, _, err := a.NewShare("not a cookie", "s1"); !errors.Is(err, console.ErrSignedOut) {
		t.Fatalf("a share without a sign-in: %v", err)
	}
	owner, other := signIn(), signIn()
	tok, _, exp, err := a.NewShare(owner, "s1")
	if err != nil || !exp.Equal(c.t.Add(time.Hour)) {
		t.Fatalf("share: exp %v (want the sign-in's, an hour), %v", exp, err)
	}
	otherTok, _, _, _ := a.NewShare(other, "s1")
	if id, ok := a.Shared(tok); !ok || id != "s1" {
		t.Fatalf("shared %q %v", id, ok)
	}
	a.SignOut(owner)
	if _, ok := a.Shared(tok); ok {
		t.Fatal("a share outlived its owner's sign-out")
	}
	if _, ok := a.Shared(otherTok); !ok {
		t.Fatal("another sign-in's share ended with this one")
	}
	c.t = c.t.Add(time.Hour)
	if _, ok := a.Shared(otherTok); ok {
		t.Fatal("a share outlived its owner's sign-in")
	}
}
