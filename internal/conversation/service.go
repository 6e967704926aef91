package conversation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/transcript"
)

// SessionsDir is the sessions directory of a state directory: state/sessions.
func SessionsDir(stateDir string) string { return filepath.Join(stateDir, "sessions") }

// Options configure a Service.
type Options struct {
	// Dir is the sessions directory (sessions.json and the transcripts).
	Dir string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger gets what a caller cannot be told (a fork transcript that could be neither indexed
	// nor archived); default: discarded.
	Logger *slog.Logger
	// MaxImportSize bounds a transcript imported from a body (ImportRequest.Body); default
	// MaxImportSize. A file imported where it is has no bound.
	MaxImportSize int64
	// Replica, when set, gets every line Hold's writers write (a cluster's transcript
	// stream); nil: the transcripts are this node's files alone.
	Replica Replica
}

// Service is the local implementation of API: it works on the files of one sessions
// directory. It is safe for concurrent use; operations that write a transcript are serialized
// per transcript, so concurrent callers of one Service (a gateway's clients) wait for each
// other instead of failing on the transcript's writer lock. Other processes writing the same
// files are still refused with RESOURCE_UNAVAILABLE while they hold a transcript.
type Service struct {
	dir       string
	now       func() time.Time
	log       *slog.Logger
	maxImport int64
	locks     pathLocks

	mu      sync.Mutex
	st      *chatstore.Store
	replica Replica
}

var _ API = (*Service)(nil)

// New returns the service of opts.Dir. Nothing is read or created until the first operation.
func New(opts Options) *Service {
	s := &Service{dir: opts.Dir, now: opts.Now, log: opts.Logger, maxImport: opts.MaxImportSize, replica: opts.Replica}
	if s.maxImport <= 0 {
		s.maxImport = MaxImportSize
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// UseReplica makes r the replica of the transcripts held from now on (Options.Replica), for
// a gateway that joins its cluster after it made the service; nil stops replicating.
func (s *Service) UseReplica(r Replica) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replica = r
}

func (s *Service) replicaOf() Replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replica
}

// Dir is the sessions directory.
func (s *Service) Dir() string { return s.dir }

// store opens sessions.json once: one Store batches the writes of concurrent callers.
func (s *Service) store() (*chatstore.Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st != nil {
		return s.st, nil
	}
	st, err := s.openStore(nil)
	if err != nil {
		return nil, err
	}
	s.st = st
	return st, nil
}

// openStore opens the store with a reset policy (nil: the default).
func (s *Service) openStore(policy *chatstore.ResetPolicy) (*chatstore.Store, error) {
	st, err := chatstore.Open(s.dir, chatstore.Options{Now: s.now, Reset: policy})
	if err != nil {
		return nil, storeError(fmt.Errorf("open session store %s: %w", s.dir, err))
	}
	return st, nil
}

// chat is what an operation works on: a store entry (Key set) or a file named by path.
type chat struct {
	Key       string
	SessionID string
	Path      string
	// Entry is the sessions.json entry, nil for a file.
	Entry *chatstore.SessionEntry
}

// CheckRef refuses an empty chat name, which names nothing (and no URL path can carry).
func CheckRef(ref string) error {
	if ref == "" {
		return abi.Errorf(abi.CodeInvalidArgument, "", "name a chat (KEY or SESSIONID; see nexus chat list)")
	}
	return nil
}

// lookup resolves a key, session id or label through sessions.json.
func (s *Service) lookup(ref string) (*chatstore.Store, chat, error) {
	if err := CheckRef(ref); err != nil {
		return nil, chat{}, err
	}
	st, err := s.store()
	if err != nil {
		return nil, chat{}, err
	}
	c, err := lookupIn(st, ref)
	return st, c, err
}

func lookupIn(st *chatstore.Store, ref string) (chat, error) {
	key, e, err := st.Lookup(ref)
	if err != nil {
		if errors.Is(err, chatstore.ErrNotFound) || errors.Is(err, chatstore.ErrKey) {
			return chat{}, &abi.Error{Code: abi.CodeSessionNotFound, Message: fmt.Sprintf("no chat %q (see nexus chat list)", ref), Err: err}
		}
		return chat{}, storeError(err)
	}
	return chat{Key: key, SessionID: e.SessionID, Path: transcriptPath(st, e), Entry: &e}, nil
}

// transcriptPath is where an entry's transcript lives: its sessionFile (relative to the
// sessions directory when not absolute, as upstream sometimes writes it), else
// <dir>/<sessionId>.jsonl. Values come from sessions.json, never from a caller.
func transcriptPath(st *chatstore.Store, e chatstore.SessionEntry) string {
	if f := e.SessionFile; f != "" {
		if filepath.IsAbs(f) {
			return f
		}
		return filepath.Join(st.Dir(), f)
	}
	return st.TranscriptPath(e.SessionID)
}

// storeError gives the store's errors their ABI codes.
func storeError(err error) error {
	var ae *abi.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return err
	case errors.Is(err, chatstore.ErrNotFound):
		return &abi.Error{Code: abi.CodeSessionNotFound, Message: "no such chat (see nexus chat list)", Err: err}
	case errors.Is(err, chatstore.ErrKey), errors.Is(err, chatstore.ErrInvalid), errors.Is(err, chatstore.ErrExists),
		errors.Is(err, chatstore.ErrLabelConflict), errors.Is(err, chatstore.ErrTooLarge):
		return &abi.Error{Code: abi.CodeInvalidArgument, Message: "session store refused", Err: err}
	case errors.Is(err, chatstore.ErrCorrupt):
		// The file is the user's, not nexus's bug: say what to do about it.
		return &abi.Error{Code: abi.CodeInvalidArgument, Message: "sessions.json is damaged and nexus left it as it is; " +
			"\"nexus chat recover\" archives it and restores its previous version (sessions.json.bak), or repair it by hand", Err: err}
	}
	return err
}

// openTranscript opens a transcript for reading; what makes it unreadable for the user's
// reasons (missing, not a pi file, empty) is INVALID_ARGUMENT.
func openTranscript(path string) (*transcript.File, error) {
	f, err := transcript.Open(path)
	if err == nil {
		return f, nil
	}
	return nil, transcriptError(path, err)
}

func transcriptError(path string, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &abi.Error{Code: abi.CodeInvalidArgument, Message: "no transcript at " + path, Err: err}
	case errors.Is(err, transcript.ErrForeignFormat), errors.Is(err, transcript.ErrEmpty):
		return &abi.Error{Code: abi.CodeInvalidArgument, Message: "not a pi transcript", Err: err}
	}
	return fmt.Errorf("open transcript %s: %w", path, err)
}

// writerError gives the transcript writer's errors their ABI codes.
func writerError(c chat, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &abi.Error{Code: abi.CodeInvalidArgument, SessionID: c.SessionID, Message: fmt.Sprintf("chat %s has no transcript yet (%s)", c.Key, c.Path), Err: err}
	case errors.Is(err, transcript.ErrLocked):
		return &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: c.SessionID, Message: "the transcript is being written by another process; try again when it is done", Err: err}
	case errors.Is(err, ErrReplicaConflict), errors.Is(err, ErrLeaseLost):
		return &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: c.SessionID, Message: "the conversation is written by another node of the cluster", Err: err}
	case errors.Is(err, transcript.ErrUnknownEntry):
		return &abi.Error{Code: abi.CodeInvalidArgument, SessionID: c.SessionID, Message: "no such entry (see nexus chat tree)", Err: err}
	case errors.Is(err, transcript.ErrForeignFormat), errors.Is(err, transcript.ErrEmpty):
		return &abi.Error{Code: abi.CodeInvalidArgument, SessionID: c.SessionID, Message: "not a pi transcript", Err: err}
	}
	return err
}

// exists reports whether path names a file; other errors count as existing so callers fail
// on them later with the real error.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// pathLocks serializes the writers of one transcript within the service.
type pathLocks struct {
	mu sync.Mutex
	m  map[string]*pathLock
}

type pathLock struct {
	sem  chan struct{}
	refs int
}

// lock waits for path's turn (or ctx) and returns the unlock.
func (l *pathLocks) lock(ctx context.Context, path string) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*pathLock{}
	}
	pl := l.m[path]
	if pl == nil {
		pl = &pathLock{sem: make(chan struct{}, 1)}
		l.m[path] = pl
	}
	pl.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		if pl.refs--; pl.refs == 0 {
			delete(l.m, path)
		}
		l.mu.Unlock()
	}
	select {
	case pl.sem <- struct{}{}:
		return func() { <-pl.sem; release() }, nil
	case <-ctx.Done():
		release()
		return nil, fmt.Errorf("wait for transcript %s: %w", path, ctx.Err())
	}
}
