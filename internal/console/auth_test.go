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
