package conversation

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/transcript"
)

// MaxImportSize is the default bound of a transcript imported from a body, as a gateway
// receives it (POST /v1/chats/import): the body is stored in a temporary file before anything
// else, and a client must not be able to fill the disk. A local import reads the file where it
// is and has no such bound.
const MaxImportSize = 1 << 30

// ErrImportTooLarge is in the chain of the error of a body over the import bound.
var ErrImportTooLarge = errors.New("transcript too large to import")

// TranscriptContentType is the media type of a transcript's bytes (JSON lines).
const TranscriptContentType = "application/x-ndjson"

// importableID is what a header id must look like to name <id>.jsonl: uuids, hex and the
// like. No '/', '.' or anything else that could make the name leave the sessions directory.
var importableID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// importKeyPrefix starts the default key of an imported chat: agent:main:import:<id>.
const importKeyPrefix = "agent:main:import:"

// OpenImportSource opens a transcript file to import, as the caller names it; what keeps it
// from being read (missing, a directory) is INVALID_ARGUMENT. It returns the absolute path,
// which an import reports as its source.
func OpenImportSource(name string) (*os.File, string, error) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, "", fmt.Errorf("resolve %s: %w", name, err)
	}
	f, err := os.Open(abs) // #nosec G304 -- the user names the file to import
	if err != nil {
		return nil, "", transcriptError(abs, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", abs)
	}
	if err != nil {
		_ = f.Close()
		return nil, "", &abi.Error{Code: abi.CodeInvalidArgument, Message: "cannot import " + abs, Err: err}
	}
	return f, abs, nil
}

// Import adopts a transcript (docs/conversations.md, import). The source is only read: a file
// (req.Source) is read where it is, a body (req.Body) is first stored in a private temporary
// file of the sessions directory, which then becomes the copy.
func (s *Service) Import(ctx context.Context, req ImportRequest) (*ImportResult, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	if req.Body == nil {
		in, abs, err := OpenImportSource(req.Source)
		if err != nil {
			return nil, err
		}
		_ = in.Close()
		return s.importFile(ctx, st, abs, abs, "", req.Key)
	}
	tmp, err := s.spool(req.Body)
	if tmp != "" {
		// The spool is ours alone; a finished copy is a link to it, so it goes on every path.
		defer func() { _ = os.Remove(tmp) }()
	}
	if err != nil {
		return nil, err
	}
	return s.importFile(ctx, st, tmp, req.Source, tmp, req.Key)
}

// tempName is a fresh private temporary file name in the sessions directory.
func (s *Service) tempName() (string, error) {
	if err := fsutil.MkdirPrivate(s.dir); err != nil {
		return "", fmt.Errorf("create %s: %w", s.dir, err)
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", fmt.Errorf("temp name: %w", err)
	}
	return filepath.Join(s.dir, ".import-"+hex.EncodeToString(rnd[:])+".tmp"), nil
}

// spool stores body in a temporary file, synced; it returns the file's name as soon as it
// exists, so the caller removes it even when spooling failed.
func (s *Service) spool(body io.Reader) (string, error) {
	tmp, err := s.tempName()
	if err != nil {
		return "", err
	}
	out, err := fsutil.CreateExclusive(tmp)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", tmp, err)
	}
	n, err := io.Copy(out, io.LimitReader(body, s.maxImport+1))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return tmp, fmt.Errorf("receive transcript: %w", err)
	case n > s.maxImport:
		return tmp, &abi.Error{Code: abi.CodeInvalidArgument, Message: fmt.Sprintf("the transcript exceeds %d bytes, the most imported from a body", s.maxImport), Err: ErrImportTooLarge}
	}
	return tmp, nil
}

// importFile imports the transcript at path, reported as source. spooled, when set, is path
// itself: a private temporary copy that can be linked into place instead of copied again.
func (s *Service) importFile(ctx context.Context, st *chatstore.Store, path, source, spooled, key string) (*ImportResult, error) {
	f, err := openTranscript(path)
	if err != nil {
		var ae *abi.Error
		if spooled != "" && errors.As(err, &ae) && ae.Err != nil {
			// The temporary name means nothing to the caller: name the source.
			return nil, &abi.Error{Code: ae.Code, SessionID: ae.SessionID, Message: ae.Message,
				Err: errors.New(strings.ReplaceAll(ae.Err.Error(), path, source))}
		}
		return nil, err
	}
	defer func() { _ = f.Close() }()
	id := f.Header.ID
	if !importableID.MatchString(id) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "%s: header id %q cannot name a transcript file (want letters, digits, - and _)", source, id)
	}
	explicitKey := key != ""
	if !explicitKey {
		key = importKeyPrefix + id
	}
	k, err := chatstore.ParseKey(key)
	if err != nil {
		return nil, storeError(err)
	}
	key = k.String()
	if e, err := st.Get(key); err == nil && e.SessionID != id {
		return nil, abi.Errorf(abi.CodeInvalidArgument, e.SessionID, "key %s already names another chat (session %s)", key, e.SessionID)
	}
	dst := st.TranscriptPath(id)
	unlock, err := s.locks.lock(ctx, dst)
	if err != nil {
		return nil, err
	}
	defer unlock()
	copied, migrated := false, false
	switch same, err := sameTranscript(f, dst); {
	case err != nil:
		return nil, err
	case same == nil:
		if migrated, err = s.copyTranscript(path, spooled != "", dst, f.Header.Version < transcript.CurrentVersion); err != nil {
			return nil, err
		}
		copied = true
	case !*same:
		return nil, abi.Errorf(abi.CodeInvalidArgument, id, "a different transcript with session id %s is already in the store (%s)", id, dst)
	default:
		// Already imported: under another key, that chat is the answer unless a key was asked for.
		if k2, e2, err := st.Lookup(id); err == nil && e2.SessionID == id && k2 != key {
			if explicitKey {
				return nil, abi.Errorf(abi.CodeInvalidArgument, id, "session %s is already the chat %s", id, k2)
			}
			key = k2
		}
	}
	entry, err := st.Get(key)
	if errors.Is(err, chatstore.ErrNotFound) {
		entry, err = st.Create(ctx, key, importFields(f, id, dst))
	}
	if err != nil {
		return nil, storeError(err)
	}
	return &ImportResult{Key: key, SessionID: id, File: dst, Source: source, Copied: copied, Migrated: migrated, Entry: entry}, nil
}

// importFields are the sessions.json fields an imported transcript tells.
func importFields(f *transcript.File, id, dst string) map[string]any {
	fields := map[string]any{"sessionId": id, "sessionFile": dst}
	if t, err := time.Parse(time.RFC3339Nano, f.Header.Timestamp); err == nil {
		fields["sessionStartedAt"] = t.UnixMilli()
	}
	if n := f.SessionName(); n != "" {
		fields["displayName"] = n
	}
	var model *transcript.Model
	level := ""
	for _, e := range f.Path("") {
		switch {
		case e.Type == "thinking_level_change":
			level = e.ThinkingLevel()
		case e.Type == "model_change", e.Type == "message" && e.Role == "assistant":
			model = &transcript.Model{Provider: e.Provider, ModelID: e.ModelID}
		}
	}
	if model != nil && model.ModelID != "" {
		fields["model"] = model.ModelID
		if model.Provider != "" {
			fields["modelProvider"] = model.Provider
		}
	}
	if transcript.ValidThinkingLevel(level) {
		fields["thinkingLevel"] = level
	}
	return fields
}

// sameTranscript compares src with the transcript at dst: nil when dst does not exist, else
// whether both have the header id and the same entries line for line (after migration, so a v1
// file and its v3 copy compare equal).
func sameTranscript(src *transcript.File, dst string) (*bool, error) {
	if !exists(dst) {
		return nil, nil
	}
	d, err := openTranscript(dst)
	if err != nil {
		return nil, err
	}
	defer func() { _ = d.Close() }()
	same := d.Header.ID == src.Header.ID && len(d.Entries) == len(src.Entries)
	for i := 0; same && i < len(d.Entries); i++ {
		a, err := src.Raw(src.Entries[i])
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", src.Header.ID, err)
		}
		b, err := d.Raw(d.Entries[i])
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", dst, err)
		}
		same = bytes.Equal(a, b)
	}
	return &same, nil
}

// copyTranscript puts a copy of src at dst: src itself when it is a private temporary file of
// the sessions directory (owned), else a copy in a private temporary file beside dst. The copy
// is migrated to v3 when asked, synced and linked to dst, which is never overwritten: a
// concurrent import of the same id loses with INVALID_ARGUMENT. A source not owned is only
// read.
func (s *Service) copyTranscript(src string, owned bool, dst string, migrate bool) (migrated bool, err error) {
	dir := filepath.Dir(dst)
	tmp := src
	if !owned {
		if tmp, err = s.tempName(); err != nil {
			return false, err
		}
		// The temp file is ours alone; it goes away on every path, the link keeps a finished copy.
		defer func() { _ = os.Remove(tmp) }()
		if err := copyFile(src, tmp); err != nil {
			return false, err
		}
	}
	if migrate {
		archived, err := transcript.Migrate(tmp, s.now())
		if err != nil {
			return false, fmt.Errorf("migrate %s: %w", src, err)
		}
		// The archive is the unmigrated temp copy; the source file is that original.
		if archived != "" {
			defer func() { _ = os.Remove(archived) }()
		}
		migrated = archived != ""
	}
	if err := os.Link(tmp, dst); err != nil {
		if errors.Is(err, os.ErrExist) {
			return false, abi.Errorf(abi.CodeInvalidArgument, "", "%s appeared while importing; run the import again", dst)
		}
		return false, fmt.Errorf("link %s: %w", dst, err)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return false, fmt.Errorf("sync %s: %w", dir, err)
	}
	return migrated, nil
}

// copyFile copies src into the new private file tmp and syncs it.
func copyFile(src, tmp string) error {
	out, err := fsutil.CreateExclusive(tmp)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	in, err := os.Open(src) // #nosec G304 -- the user names the file to import
	if err != nil {
		_ = out.Close()
		return fmt.Errorf("open %s: %w", src, err)
	}
	_, err = io.Copy(out, in)
	_ = in.Close()
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, tmp, err)
	}
	return nil
}
