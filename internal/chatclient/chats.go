// Package chatclient is conversation.API over a gateway's /v1/chats routes (docs/ABI.md):
// what nexus chat uses when a gateway runs. It is apart from internal/client, which links
// nothing of the conversation store (no transcripts, no file locks).
package chatclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/conversation"
)

// Chats is conversation.API over a gateway's /v1/chats routes (docs/ABI.md).
type Chats struct{ c *client.Client }

var _ conversation.API = (*Chats)(nil)

// New returns the conversation API of the gateway c talks to.
func New(c *client.Client) *Chats { return &Chats{c: c} }

// checkRef refuses what cannot name a chat in a path: nothing, and "/" alone, which Go's
// router takes for a trailing slash however it is escaped.
func checkRef(ref string) error {
	if ref == "/" {
		return abi.Errorf(abi.CodeInvalidArgument, "", `a chat named "/" cannot be named in a URL path; use its key or session id`)
	}
	return conversation.CheckRef(ref)
}

// ChatPath is the path of a chat's route under /v1: /chats/<ref><rest>. The ref is one path
// segment whatever it holds (keys have ':', labels may have '/', '?', '%'...): escaped, and
// a ref of dots only spelled with %2E, which no router may take for a relative path.
func ChatPath(ref, rest string) string {
	return "/chats/" + client.PathSegment(ref) + rest
}

func (ch *Chats) do(ctx context.Context, method, path string, body, out any) error {
	return ch.c.Do(ctx, method, path, body, out)
}

// List returns the chats matching opts.
func (ch *Chats) List(ctx context.Context, opts conversation.ListOptions) ([]chatstore.Item, error) {
	q := url.Values{}
	for k, v := range map[string]string{"agent": opts.Agent, "channel": opts.Channel, "label": opts.Label, "search": opts.Search} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !opts.Since.IsZero() {
		q.Set("since", opts.Since.UTC().Format(time.RFC3339Nano))
	}
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	p := "/chats"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var out struct {
		Chats []chatstore.Item `json:"chats"`
	}
	if err := ch.do(ctx, http.MethodGet, p, nil, &out); err != nil {
		return nil, err
	}
	if out.Chats == nil {
		out.Chats = []chatstore.Item{}
	}
	return out.Chats, nil
}

// Show describes the chat ref.
func (ch *Chats) Show(ctx context.Context, ref string) (*conversation.Show, error) {
	if err := checkRef(ref); err != nil {
		return nil, err
	}
	var out conversation.Show
	if err := ch.do(ctx, http.MethodGet, ChatPath(ref, ""), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// History streams the context of the chat ref.
func (ch *Chats) History(ctx context.Context, ref string, opts conversation.HistoryOptions) (*conversation.History, error) {
	if opts.Limit < 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "the history limit must not be negative")
	}
	if err := checkRef(ref); err != nil {
		return nil, err
	}
	q := url.Values{}
	if opts.Branch != "" {
		q.Set("branch", opts.Branch)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Count {
		q.Set("count", "true")
	}
	p := ChatPath(ref, "/history")
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	resp, err := ch.c.Open(ctx, http.MethodGet, p, nil, 0, "") //nolint:bodyclose // the History returned owns the body; its Close closes it
	if err != nil {
		return nil, err
	}
	return conversation.ReadHistoryNDJSON(resp.Body, opts.Count)
}

// Tree lists the entries of the chat ref.
func (ch *Chats) Tree(ctx context.Context, ref string) (*conversation.Tree, error) {
	if err := checkRef(ref); err != nil {
		return nil, err
	}
	resp, err := ch.c.Open(ctx, http.MethodGet, ChatPath(ref, "/tree"), nil, 0, "")
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var t conversation.Tree
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
		return nil, ch.c.ConnectionLost(fmt.Errorf("read tree: %w", err))
	}
	return &t, nil
}

// Export writes the chat ref in format to w as the gateway streams it.
func (ch *Chats) Export(ctx context.Context, ref string, format conversation.ExportFormat, w io.Writer) error {
	if !format.Valid() {
		return abi.Errorf(abi.CodeInvalidArgument, "", "unknown export format %q (want jsonl, md or html)", format)
	}
	if err := checkRef(ref); err != nil {
		return err
	}
	resp, err := ch.c.Open(ctx, http.MethodGet, ChatPath(ref, "/export?format="+url.QueryEscape(string(format))), nil, 0, "")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	// The body ends properly only after the whole export: a gateway that failed in the middle
	// cuts the connection, which the copy reports as an unexpected end.
	if _, err := io.Copy(w, &readSide{resp.Body}); err != nil {
		var rerr readError
		if errors.As(err, &rerr) {
			return ch.c.ConnectionLost(fmt.Errorf("export cut short: %w", rerr.err))
		}
		return fmt.Errorf("write export: %w", err)
	}
	return nil
}

// readSide marks the errors of a response body, so a copy can tell them from its writer's.
type readSide struct{ r io.Reader }

type readError struct{ err error }

func (e readError) Error() string { return e.err.Error() }

func (r *readSide) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = readError{err}
	}
	return n, err
}

// Fork forks the chat ref.
func (ch *Chats) Fork(ctx context.Context, ref string, req conversation.ForkRequest) (*conversation.ForkResult, error) {
	var out conversation.ForkResult
	return post(ctx, ch, ref, "/fork", req, &out)
}

// Label labels an entry of the chat ref.
func (ch *Chats) Label(ctx context.Context, ref string, req conversation.LabelRequest) (*conversation.LabelResult, error) {
	var out conversation.LabelResult
	return post(ctx, ch, ref, "/label", req, &out)
}

// Name names the chat ref.
func (ch *Chats) Name(ctx context.Context, ref string, req conversation.NameRequest) (*conversation.NameResult, error) {
	var out conversation.NameResult
	return post(ctx, ch, ref, "/name", req, &out)
}

// Compact compacts the chat ref.
func (ch *Chats) Compact(ctx context.Context, ref string, req conversation.CompactRequest) (*conversation.CompactResult, error) {
	var out conversation.CompactResult
	return post(ctx, ch, ref, "/compact", req, &out)
}

// Reset starts a new session for the chat ref.
func (ch *Chats) Reset(ctx context.Context, ref string) (*conversation.ResetResult, error) {
	var out conversation.ResetResult
	return post(ctx, ch, ref, "/reset", struct{}{}, &out)
}

// Archive removes the chat ref from the store.
func (ch *Chats) Archive(ctx context.Context, ref string) (*conversation.ArchiveResult, error) {
	var out conversation.ArchiveResult
	return post(ctx, ch, ref, "/archive", struct{}{}, &out)
}

// Resolve routes an interaction to key's current session.
func (ch *Chats) Resolve(ctx context.Context, key string, req conversation.ResolveRequest) (*conversation.ResolveResult, error) {
	if key == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "resolve needs a session key")
	}
	var out conversation.ResolveResult
	return post(ctx, ch, key, "/resolve", req, &out)
}

// Recover repairs the gateway's damaged sessions.json.
func (ch *Chats) Recover(ctx context.Context) (*chatstore.RecoverReport, error) {
	var out chatstore.RecoverReport
	if err := ch.do(ctx, http.MethodPost, "/chats/recover", struct{}{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Import uploads the transcript (req.Body, else the file req.Source) for the gateway to adopt.
func (ch *Chats) Import(ctx context.Context, req conversation.ImportRequest) (*conversation.ImportResult, error) {
	body, size := req.Body, int64(-1)
	source := req.Source
	if body == nil {
		f, abs, err := conversation.OpenImportSource(req.Source)
		if err != nil {
			return nil, err
		}
		defer func() { _ = f.Close() }()
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		if size > conversation.MaxImportSize {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "%s is %d bytes; a gateway imports transcripts of at most %d bytes (stop it, or use nexus chat --transport local)", abs, size, conversation.MaxImportSize)
		}
		body, source = f, abs
	}
	q := url.Values{}
	if source != "" {
		q.Set("source", source)
	}
	if req.Key != "" {
		q.Set("key", req.Key)
	}
	p := "/chats/import"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	resp, err := ch.c.Open(ctx, http.MethodPost, p, body, size, conversation.TranscriptContentType)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var out conversation.ImportResult
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, ch.c.ConnectionLost(fmt.Errorf("read import answer: %w", err))
	}
	return &out, nil
}

// post sends a chat command and decodes its answer into out.
func post[T any](ctx context.Context, ch *Chats, ref, rest string, req any, out *T) (*T, error) {
	if err := checkRef(ref); err != nil {
		return nil, err
	}
	if err := ch.do(ctx, http.MethodPost, ChatPath(ref, rest), req, out); err != nil {
		return nil, err
	}
	return out, nil
}
