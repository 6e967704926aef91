package cli

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
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/transcript"
)

// importableID is what a header id must look like to name <id>.jsonl: uuids, hex and the
// like. No '/', '.' or anything else that could make the name leave the sessions directory.
var importableID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// importKeyPrefix starts the default key of an imported chat: agent:main:import:<id>.
const importKeyPrefix = "agent:main:import:"

func (a *app) chatImportCmd() *cobra.Command {
	var key string
	cmd := a.printing(&cobra.Command{
		Use:   "import FILE [--key KEY]",
		Short: "Adopt a pi or OpenClaw transcript: copy it into the store as <header id>.jsonl and index it",
		Long: "The source file is only read. v1 and v2 files are migrated on the way (the copy is written\n" +
			"as v3); v3 files are copied byte for byte. The default key is agent:main:import:<id>.\n" +
			"Importing the same transcript again is a no-op; a different file with the same header id\n" +
			"is refused.",
		Args: cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string) (any, error) {
		out, err := a.importChat(cmd.Context(), args[0], key)
		if err != nil {
			return nil, err
		}
		return out, nil
	})
	cmd.Flags().StringVar(&key, "key", "", "session key of the chat (default agent:main:import:<header id>)")
	return cmd
}

func (a *app) importChat(ctx context.Context, src, key string) (map[string]any, error) {
	abs, err := filepath.Abs(src)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", src, err)
	}
	f, err := openTranscript(abs)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	id := f.Header.ID
	if !importableID.MatchString(id) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "%s: header id %q cannot name a transcript file (want letters, digits, - and _)", src, id)
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
	st, err := a.openStore()
	if err != nil {
		return nil, err
	}
	if e, err := st.Get(key); err == nil && e.SessionID != id {
		return nil, abi.Errorf(abi.CodeInvalidArgument, e.SessionID, "key %s already names another chat (session %s)", key, e.SessionID)
	}
	dst := st.TranscriptPath(id)
	copied, migrated := false, false
	switch same, err := sameTranscript(f, dst); {
	case err != nil:
		return nil, err
	case same == nil:
		if migrated, err = a.copyTranscript(abs, dst, f.Header.Version < transcript.CurrentVersion); err != nil {
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
	return map[string]any{"key": key, "sessionId": id, "file": dst, "source": abs, "copied": copied, "migrated": migrated, "entry": entry}, nil
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

// copyTranscript copies src to a private temporary file beside dst, migrates it to v3 when
// asked, syncs it and links it to dst, which is never overwritten: a concurrent import of the
// same id loses with INVALID_ARGUMENT. The source is only read.
func (a *app) copyTranscript(src, dst string, migrate bool) (migrated bool, err error) {
	dir := filepath.Dir(dst)
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return false, fmt.Errorf("create %s: %w", dir, err)
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return false, fmt.Errorf("temp name: %w", err)
	}
	tmp := filepath.Join(dir, ".import-"+hex.EncodeToString(rnd[:])+".tmp")
	out, err := fsutil.CreateExclusive(tmp)
	if err != nil {
		return false, fmt.Errorf("create %s: %w", tmp, err)
	}
	// The temp file is ours alone; it goes away on every path, the link keeps a finished copy.
	defer func() { _ = os.Remove(tmp) }()
	in, err := os.Open(src) // #nosec G304 -- the user names the file to import
	if err != nil {
		_ = out.Close()
		return false, fmt.Errorf("open %s: %w", src, err)
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
		return false, fmt.Errorf("copy %s to %s: %w", src, tmp, err)
	}
	if migrate {
		archived, err := transcript.Migrate(tmp, a.env.Now())
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
