package conversation

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/transcript"
)

// List returns the chats matching opts, most recently updated first.
func (s *Service) List(_ context.Context, opts ListOptions) ([]chatstore.Item, error) {
	if opts.Limit < 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "the list limit must not be negative")
	}
	f := chatstore.Filter{Channel: opts.Channel, Search: opts.Search, Since: opts.Since}
	if opts.Agent != "" {
		f.Agent = chatstore.NormalizeAgentID(opts.Agent)
	}
	// The label filter is exact, so the cap applies after it.
	if opts.Label == "" {
		f.Limit = opts.Limit
	}
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	items, err := st.List(f)
	if err != nil {
		return nil, storeError(err)
	}
	if opts.Label != "" {
		kept := items[:0]
		for _, it := range items {
			if it.Entry.Label == opts.Label {
				kept = append(kept, it)
			}
		}
		items = kept
		if opts.Limit > 0 && len(items) > opts.Limit {
			items = items[:opts.Limit]
		}
	}
	if items == nil {
		items = []chatstore.Item{}
	}
	return items, nil
}

func (s *Service) writerOptions() transcript.WriterOptions {
	o := transcript.WriterOptions{Now: s.now}
	if l, ok := s.replicaOf().(LineLimiter); ok {
		o.MaxLine = l.MaxLine()
	}
	return o
}

// openWriter continues a chat's transcript. A v1/v2 file (adopted from upstream without
// import) is first rewritten as v3, its original archived as .bak: the store owns it, and
// appended entries need ids that exist on disk.
func (s *Service) openWriter(c chat) (*transcript.Writer, error) {
	return s.openWriterWith(c, s.writerOptions())
}

func (s *Service) openWriterWith(c chat, opts transcript.WriterOptions) (*transcript.Writer, error) {
	w, err := transcript.OpenWriter(c.Path, opts)
	if errors.Is(err, transcript.ErrNeedsMigration) {
		if _, err := transcript.Migrate(c.Path, s.now()); err != nil {
			return nil, writerError(c, fmt.Errorf("migrate %s to v3: %w", c.Path, err))
		}
		w, err = transcript.OpenWriter(c.Path, opts)
	}
	if err != nil {
		return nil, writerError(c, err)
	}
	return w, nil
}

// closeWriter closes w and reports its error unless an earlier one is being returned.
func closeWriter(w *transcript.Writer, err *error) {
	if cerr := w.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("close transcript %s: %w", w.Path(), cerr)
	}
}

// writing looks ref up and holds its transcript for the service's writers until the returned
// unlock.
func (s *Service) writing(ctx context.Context, ref string) (*chatstore.Store, chat, func(), error) {
	st, c, err := s.lookup(ref)
	if err != nil {
		return nil, chat{}, nil, err
	}
	unlock, err := s.locks.lock(ctx, c.Path)
	if err != nil {
		return nil, chat{}, nil, err
	}
	return st, c, unlock, nil
}

// Label appends a label entry for req.EntryID (no label clears it).
func (s *Service) Label(ctx context.Context, ref string, req LabelRequest) (_ *LabelResult, err error) {
	if req.EntryID == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "label needs the entry to label (an entry id; see nexus chat tree)")
	}
	_, c, unlock, err := s.writing(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	w, err := s.openWriter(c)
	if err != nil {
		return nil, err
	}
	defer closeWriter(w, &err)
	id, err := w.AppendLabel(req.EntryID, req.Label)
	if err != nil {
		return nil, writerError(c, err)
	}
	out := &LabelResult{Key: c.Key, SessionID: c.SessionID, EntryID: id, TargetID: req.EntryID}
	if req.Label != "" {
		l := req.Label
		out.Label = &l
	}
	return out, nil
}

// Name appends a session_info entry (when the chat has a transcript) and sets displayName.
func (s *Service) Name(ctx context.Context, ref string, req NameRequest) (*NameResult, error) {
	st, c, unlock, err := s.writing(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if exists(c.Path) {
		w, err := s.openWriter(c)
		if err != nil {
			return nil, err
		}
		_, aerr := w.AppendSessionInfo(req.Name)
		if cerr := w.Close(); aerr == nil {
			aerr = cerr
		}
		if aerr != nil {
			return nil, writerError(c, aerr)
		}
	}
	patch := map[string]any{"displayName": nil}
	if req.Name != "" {
		patch["displayName"] = req.Name
	}
	e, err := st.Patch(ctx, c.Key, patch)
	if err != nil {
		return nil, storeError(err)
	}
	return &NameResult{Key: c.Key, Entry: e}, nil
}

// SetTaskStatus records a subagent conversation's task status in its index entry (pending,
// running, completed or failed).
func (s *Service) SetTaskStatus(ctx context.Context, key, status string) error {
	st, err := s.store()
	if err != nil {
		return err
	}
	if _, err := st.Patch(ctx, key, map[string]any{"taskStatus": status}); err != nil {
		return storeError(err)
	}
	return nil
}

// Fork writes pi's createBranchedSession of ref at req.At as a new transcript, then indexes
// it; a transcript that cannot be indexed is archived, never left behind unindexed.
func (s *Service) Fork(ctx context.Context, ref string, req ForkRequest) (*ForkResult, error) {
	if req.At == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "fork needs the entry to fork at (an entry id; see nexus chat tree)")
	}
	st, src, err := s.lookup(ref)
	if err != nil {
		return nil, err
	}
	at := req.At
	f, err := openTranscript(src.Path)
	if err != nil {
		return nil, err
	}
	if f.Entry(at) == nil {
		_ = f.Close()
		return nil, abi.Errorf(abi.CodeInvalidArgument, src.SessionID, "no entry %q in chat %s (see nexus chat tree)", at, src.Key)
	}
	turns, err := transcript.Turns(f, at)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("turns of %s: %w", src.Path, err)
	}
	id := chatstore.NewUUIDv7()
	newKey := req.Key
	if newKey == "" {
		// The tail of a v7 uuid is random; its head is the clock, equal for forks made together.
		newKey = src.Key + ":fork:" + id[len(id)-8:]
	}
	k, err := chatstore.ParseKey(newKey)
	if err != nil {
		return nil, storeError(err)
	}
	newKey = k.String()
	if _, err := st.Get(newKey); err == nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "chat %s already exists", newKey)
	}
	dst := st.TranscriptPath(id)
	opts := s.writerOptions()
	opts.NewSessionID = func() string { return id }
	w, err := transcript.Fork(src.Path, at, dst, opts)
	if err != nil {
		return nil, writerError(src, err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("close fork %s: %w", dst, err)
	}
	fields := map[string]any{
		"sessionId":           id,
		"sessionFile":         dst,
		"forkedFromSessionId": src.SessionID,
		"forkedFromEntryId":   at,
	}
	// The turn forked from is the last answered one on the path (a fork at a new question has
	// an open turn without an id after it).
	for i := len(turns) - 1; i >= 0; i-- {
		if turns[i].ID != "" {
			fields["forkedFromTurnId"] = turns[i].ID
			break
		}
	}
	if e := src.Entry; e != nil {
		for k, v := range map[string]string{"model": e.Model, "modelProvider": e.ModelProvider, "thinkingLevel": e.ThinkingLevel, "project": e.Project, "chatType": e.ChatType} {
			if v != "" {
				fields[k] = v
			}
		}
	}
	ne, err := st.Create(ctx, newKey, fields)
	if err != nil {
		// The new transcript belongs to no chat: archive it rather than leave it unindexed.
		if _, aerr := chatstore.Archive(dst, "deleted", s.now()); aerr != nil {
			s.log.Warn("fork transcript left unindexed", "file", dst, "err", aerr)
		}
		return nil, storeError(err)
	}
	se, err := st.Patch(ctx, src.Key, map[string]any{"hasChildren": true})
	if err != nil {
		return nil, storeError(err)
	}
	return &ForkResult{
		Key: newKey, Entry: ne, File: dst,
		ForkedFrom: ForkSource{Key: src.Key, SessionID: src.SessionID, EntryID: at, Entry: se},
	}, nil
}

// Compact runs line compaction (req.MaxLines) or appends a summary compaction (req.Summary).
func (s *Service) Compact(ctx context.Context, ref string, req CompactRequest) (*CompactResult, error) {
	// The context wraps the summary in its own lines; a file's final newline would double them.
	summary := strings.TrimSpace(req.Summary)
	switch {
	case req.MaxLines < 0:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "maxLines must be at least 1")
	case (req.MaxLines > 0) == (req.Summary != ""):
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "compact needs exactly one of maxLines and summary")
	case req.Summary != "" && summary == "":
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "the summary is empty")
	case req.KeepTokens != nil && req.MaxLines > 0:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "keepTokens goes with a summary")
	case req.KeepTokens != nil && *req.KeepTokens < 0:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "keepTokens must not be negative")
	}
	st, c, unlock, err := s.writing(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if req.MaxLines > 0 {
		return s.compactLines(ctx, st, c, req.MaxLines)
	}
	keep := transcript.DefaultKeepRecentTokens
	if req.KeepTokens != nil {
		keep = *req.KeepTokens
	}
	return s.compactSummary(ctx, st, c, summary, keep)
}

func (s *Service) compactLines(ctx context.Context, st *chatstore.Store, c chat, maxLines int) (*CompactResult, error) {
	archived, err := transcript.CompactLines(c.Path, maxLines, s.now())
	if err != nil {
		return nil, writerError(c, err)
	}
	if archived != "" {
		// The file was rewritten in place: the cluster's copy becomes the new file, else the
		// next Hold would find them apart and refuse.
		if err := s.reseedReplica(ctx, c.SessionID, c.Path); err != nil {
			return nil, writerError(c, err)
		}
	}
	compacted := archived != ""
	out := &CompactResult{Key: c.Key, SessionID: c.SessionID, Compacted: &compacted}
	if !compacted {
		out.Entry = *c.Entry
		return out, nil
	}
	// Token counts described the old file; the next run recounts them.
	e, err := st.PatchFunc(ctx, c.Key, func(cur chatstore.SessionEntry) (any, error) {
		return map[string]any{
			"inputTokens": nil, "outputTokens": nil, "totalTokens": nil,
			"compactionCount": cur.CompactionCount + 1,
		}, nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	out.Archived = archived
	out.Entry = e
	return out, nil
}

func (s *Service) compactSummary(ctx context.Context, st *chatstore.Store, c chat, summary string, keep int) (_ *CompactResult, err error) {
	w, err := s.openWriter(c)
	if err != nil {
		return nil, err
	}
	defer closeWriter(w, &err)
	id, err := transcript.Compact(w, summary, keep, nil)
	switch {
	case errors.Is(err, transcript.ErrToolCallPending):
		return nil, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: c.SessionID, Message: "a tool call of the last assistant message is unanswered; compact after its result is in", Err: err}
	case errors.Is(err, transcript.ErrNothingToCompact), errors.Is(err, transcript.ErrAlreadyCompacted):
		return nil, &abi.Error{Code: abi.CodeInvalidArgument, SessionID: c.SessionID, Message: fmt.Sprintf("nothing to compact when keeping %d tokens", keep), Err: err}
	case err != nil:
		return nil, writerError(c, err)
	}
	ce := w.File().Entry(id)
	e, err := st.PatchFunc(ctx, c.Key, countCompaction)
	if err != nil {
		return nil, storeError(err)
	}
	out := &CompactResult{Key: c.Key, SessionID: c.SessionID, CompactionID: id, Entry: e}
	if ce != nil {
		out.FirstKeptEntryID = ce.FirstKeptEntryID()
		if full, ferr := w.File().Full(ce); ferr == nil {
			out.TokensBefore = full.TokensBefore()
		}
	}
	return out, nil
}

// Reset gives ref's key a new session id; the old transcript is archived as .reset.<ts>.
func (s *Service) Reset(ctx context.Context, ref string) (*ResetResult, error) {
	st, c, unlock, err := s.writing(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	r, err := st.Reset(ctx, c.Key, chatstore.ReasonReset)
	if err != nil {
		return nil, storeError(err)
	}
	if err := s.purgeReplica(ctx, r.PreviousSessionID); err != nil {
		return nil, err
	}
	// A chat whose first message never arrived had no transcript to archive (Archived empty).
	return &ResetResult{Key: c.Key, Entry: r.Entry, PreviousSessionID: r.PreviousSessionID, Reason: r.Reason, Archived: r.Archived}, nil
}

// Archive removes ref from sessions.json; its transcript is archived as .deleted.<ts>.
func (s *Service) Archive(ctx context.Context, ref string) (*ArchiveResult, error) {
	st, c, unlock, err := s.writing(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	archived, err := st.Delete(ctx, c.Key)
	if err != nil {
		return nil, storeError(err)
	}
	if err := s.purgeReplica(ctx, c.SessionID); err != nil {
		return nil, err
	}
	return &ArchiveResult{Key: c.Key, SessionID: c.SessionID, Archived: archived}, nil
}

// Resolve routes an interaction to key's current session under req's reset policy
// (docs/conversations.md, Session keys) and records it (lastInteractionAt).
func (s *Service) Resolve(ctx context.Context, key string, req ResolveRequest) (*ResolveResult, error) {
	policy := chatstore.DefaultResetPolicy()
	policy.Disabled = req.NoAutoReset
	if req.ResetHour != nil {
		policy.DailyAtHour = *req.ResetHour
	}
	if req.IdleMinutes != nil {
		policy.IdleMinutes = *req.IdleMinutes
	}
	switch {
	case key == "":
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "resolve needs a session key")
	case policy.DailyAtHour < -1 || policy.DailyAtHour > 23:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "reset hour %d: want 0-23, or -1 for no daily reset", policy.DailyAtHour)
	case policy.IdleMinutes < 0:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "the idle window must not be negative")
	}
	// The policy is this call's: a store of its own applies it (stores of one directory share
	// the file lock, in this process as across processes).
	st, err := s.openStore(&policy)
	if err != nil {
		return nil, err
	}
	e, fresh, err := st.Resolve(ctx, key)
	if err != nil {
		return nil, storeError(err)
	}
	k, _, err := st.Lookup(e.SessionID)
	if err != nil {
		k = key
	}
	return &ResolveResult{Key: k, Fresh: fresh, Entry: e}, nil
}

// Recover repairs a damaged sessions.json from its .bak; a file that parses is left alone.
func (s *Service) Recover(ctx context.Context) (*chatstore.RecoverReport, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	r, err := st.Recover(ctx)
	if err != nil {
		return nil, storeError(err)
	}
	return &r, nil
}
