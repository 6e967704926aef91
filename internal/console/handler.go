package console

import (
	"embed"
	"encoding/json"
	"errors"
	"html"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// Paths of the console under the gateway's TCP listener.
const (
	Prefix     = "/console/"
	SignInPath = "/console/signin"
	SharePath  = "/console/share"
	// ShareCookie carries a share token: the holder watches one session, read-only.
	ShareCookie = "nexus_share"
)

// The bundle web/ builds (make web: npm ci, then esbuild). Without it the console answers that
// it was not built.
//
//go:embed all:dist
var dist embed.FS

// securityHeaders go on every console answer: the page loads only from its own origin, cannot
// be framed, and sends no referrer (the sign-in URL's code never leaves in one).
func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// Handler serves the console: the sign-in (a one-time code becomes the session cookie and
// leaves the address bar), the sign-out, and the bundled page, which only a signed-in browser
// gets. The gateway has checked the Host header before.
func Handler(a *Auth) http.Handler {
	files, err := fs.Sub(dist, "dist")
	if err != nil { // the embed directive guarantees dist
		panic(err)
	}
	static := http.FileServerFS(files)
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+SignInPath, func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w)
		w.Header().Set("Cache-Control", "no-store")
		cookie, err := a.Redeem(r.URL.Query().Get("code"))
		if err != nil {
			page(w, http.StatusUnauthorized, "Sign-in refused", err.Error()+". Run <code>nexus console</code> for a new sign-in link.")
			return
		}
		// Secure only over TLS: the gateway's listener is plain HTTP (loopback, or a LAN address
		// where a browser would drop a Secure cookie); HttpOnly and SameSite=Strict hold always.
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: cookie, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, //nolint:gosec // G124: see above
			Secure: r.TLS != nil, MaxAge: int(a.opt.SessionTTL.Seconds())})
		// A redirect, so the code leaves the address bar and the history.
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
	})
	// A share link: its token becomes a cookie (HttpOnly, SameSite=Strict) that lets the
	// browser watch one session read-only, and leaves the address bar.
	mux.HandleFunc("GET "+SharePath, func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w)
		w.Header().Set("Cache-Control", "no-store")
		token := r.URL.Query().Get("token")
		id, ok := a.Shared(token)
		if !ok {
			page(w, http.StatusUnauthorized, "Share link refused", "This share link is invalid or has expired. Ask for a new one.")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: ShareCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, //nolint:gosec // G124: Secure over TLS only, as the sign-in cookie
			Secure: r.TLS != nil, MaxAge: int(ShareTTL.Seconds())})
		http.Redirect(w, r, Prefix+"#/view/"+url.PathEscape(id), http.StatusSeeOther)
	})
	// Minting a share link is a signed-in page's, from the gateway's own origin.
	mux.HandleFunc("POST "+SharePath, func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w)
		w.Header().Set("Content-Type", "application/json")
		id := r.URL.Query().Get("session")
		if !a.SignedIn(r) || !SameOrigin(r) || id == "" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"sign in to the console, from its own page, and name a session"}`))
			return
		}
		c, _ := r.Cookie(CookieName) // SignedIn found it
		_, link, exp, err := a.NewShare(c.Value, id)
		if errors.Is(err, ErrSignedOut) { // signed out since SignedIn looked
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"url": link, "expiresAt": exp.UTC().Format(time.RFC3339)})
	})
	mux.HandleFunc("POST /console/signout", func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w)
		if !SameOrigin(r) {
			page(w, http.StatusForbidden, "Refused", "a sign-out from another origin")
			return
		}
		if c, err := r.Cookie(CookieName); err == nil {
			a.SignOut(c.Value)
		}
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1, Secure: r.TLS != nil}) //nolint:gosec // G124: an expired cookie, as set above
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
	})
	mux.HandleFunc("GET "+Prefix, func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w)
		name := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r.URL.Path, Prefix)), "/")
		if name == "" || name == "index.html" {
			if !a.SignedIn(r) && !a.Sharing(r) {
				page(w, http.StatusUnauthorized, "Sign in", "This is the nexus console. Run <code>nexus console</code> on the gateway's machine for a one-time sign-in link.")
				return
			}
			if _, err := fs.Stat(files, "index.html"); err != nil {
				page(w, http.StatusServiceUnavailable, "Console not built", "This nexus was built without the console's bundle: build it with <code>make build</code> (it needs npm).")
				return
			}
			w.Header().Set("Cache-Control", "no-store")
		}
		http.StripPrefix(Prefix, static).ServeHTTP(w, r)
	})
	return mux
}

// SignedIn reports whether r carries a signed-in browser session's cookie.
func (a *Auth) SignedIn(r *http.Request) bool {
	c, err := r.Cookie(CookieName)
	return err == nil && a.Valid(c.Value)
}

// Sharing reports whether r carries a valid share link's cookie.
func (a *Auth) Sharing(r *http.Request) bool {
	_, ok := a.SharedSession(r)
	return ok
}

// SharedSession is the session r's share cookie lets it watch.
func (a *Auth) SharedSession(r *http.Request) (string, bool) {
	id, _, ok := a.SharedView(r)
	return id, ok
}

// SharedView is the session r's share cookie lets it watch, and a channel closed when the
// share is revoked (its owner signed out): a viewer's open stream ends then.
func (a *Auth) SharedView(r *http.Request) (id string, revoked <-chan struct{}, ok bool) {
	c, err := r.Cookie(ShareCookie)
	if err != nil {
		return "", nil, false
	}
	return a.share(c.Value)
}

// SameOrigin reports whether r comes from a page of the gateway's own origin: its Origin
// header names the host it was sent to. A request without Origin is not one a page's script
// made with a body (browsers send Origin on those), and is refused where it matters.
func SameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	return strings.EqualFold(o, scheme+r.Host)
}

func page(w http.ResponseWriter, status int, title, body string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>nexus: ` + html.EscapeString(title) +
		`</title></head><body><main><h1>` + html.EscapeString(title) + `</h1><p>` + body + `</p></main></body></html>`))
}
