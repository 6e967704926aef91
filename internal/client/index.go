package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// The gateway's history index (docs/ABI.md, History index): search, sessions, one session,
// counts and a sync on demand, answered with the index package's types.

// IndexSearch returns the best hits for o.Query, best first.
func (c *Client) IndexSearch(ctx context.Context, o abi.IndexSearch) ([]abi.IndexHit, error) {
	q := url.Values{"q": {o.Query}}
	for k, v := range map[string]string{"project": o.Project, "role": o.Role, "tool": o.Tool, "origin": o.Origin} {
		if v != "" {
			q.Set(k, v)
		}
	}
	addSources(q, o.Sources)
	if !o.Since.IsZero() {
		q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	addLimit(q, "limit", o.Limit)
	var out struct {
		Hits []abi.IndexHit `json:"hits"`
	}
	if err := c.do(ctx, http.MethodGet, "/index/search?"+q.Encode(), nil, &out); err != nil {
		return nil, err
	}
	if out.Hits == nil {
		out.Hits = []abi.IndexHit{}
	}
	return out.Hits, nil
}

// IndexSessions lists the indexed sessions, most recently updated first.
func (c *Client) IndexSessions(ctx context.Context, o abi.IndexSessions) ([]abi.IndexSession, error) {
	q := url.Values{}
	if o.Project != "" {
		q.Set("project", o.Project)
	}
	addSources(q, o.Sources)
	addLimit(q, "limit", o.Limit)
	var out struct {
		Sessions []abi.IndexSession `json:"sessions"`
	}
	if err := c.do(ctx, http.MethodGet, withQuery("/index/sessions", q), nil, &out); err != nil {
		return nil, err
	}
	if out.Sessions == nil {
		out.Sessions = []abi.IndexSession{}
	}
	return out.Sessions, nil
}

// IndexShow returns an indexed session (by id or a unique prefix of one) with its messages.
func (c *Client) IndexShow(ctx context.Context, o abi.IndexShow) (*abi.IndexSessionDetail, error) {
	switch {
	case strings.TrimSpace(o.Session) == "":
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "index: a session id is required")
	case o.Session == "/":
		return nil, abi.Errorf(abi.CodeInvalidArgument, o.Session, `a session named "/" cannot be named in a URL path`)
	}
	q := url.Values{}
	for k, v := range map[string]string{"source": o.Source, "around": o.Around} {
		if v != "" {
			q.Set(k, v)
		}
	}
	addLimit(q, "context", o.Context)
	var out abi.IndexSessionDetail
	if err := c.do(ctx, http.MethodGet, withQuery("/index/sessions/"+pathSegment(o.Session), q), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// IndexStats counts the index.
func (c *Client) IndexStats(ctx context.Context) (*abi.IndexStats, error) {
	var out abi.IndexStats
	if err := c.do(ctx, http.MethodGet, "/index/stats", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// IndexSync makes the gateway sync its index now (the sources named, all when none) and
// returns what the sync did. The directories read are the gateway's.
func (c *Client) IndexSync(ctx context.Context, sources ...string) (*abi.IndexSummary, error) {
	body := struct {
		Sources []string `json:"sources,omitempty"`
	}{sources}
	var out abi.IndexSummary
	if err := c.do(ctx, http.MethodPost, "/index/sync", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func addSources(q url.Values, sources []string) {
	for _, s := range sources {
		q.Add("source", s)
	}
}

func addLimit(q url.Values, k string, n int) {
	if n != 0 {
		q.Set(k, strconv.Itoa(n))
	}
}

func withQuery(p string, q url.Values) string {
	if len(q) == 0 {
		return p
	}
	return p + "?" + q.Encode()
}
