package source

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// stores caches the decoded sessions.json of each directory for the life of an adapter value
// (All and ByName make new ones, so one sync): a store is decoded once, not once per transcript
// beside it. Decoding a 750 KB store for each of 1,700 transcripts was most of the nexus
// adapter's time. A cached store is used while its size, mtime and inode stay the same.
type stores struct {
	mu sync.Mutex
	m  map[string]*storeFile
	// runs is nexus's state/subagents/runs.json, decoded the same way (nexus.go).
	runs map[string]*runsFile
}

func newStores() *stores { return &stores{m: map[string]*storeFile{}} }

type storeFile struct {
	fileStamp
	// byID and byFile hold, per session id and per transcript file name, the entry of the
	// shortest key naming it (a cron job and its run may name one session: the job's own key
	// wins, whatever the map order).
	byID, byFile map[string]keyedEntry
	// idOfKey is each key's session id: a subagent names its parent by key (spawnedBy).
	idOfKey map[string]string
}

type keyedEntry struct {
	key string
	e   storeEntry
}

func better(m map[string]keyedEntry, k string, ke keyedEntry) {
	if old, ok := m[k]; !ok || len(ke.key) < len(old.key) || (len(ke.key) == len(old.key) && ke.key < old.key) {
		m[k] = ke
	}
}

// lookup finds the entry of session id (or of the transcript at path) in the store at
// storePath. A missing store, or one that is not a regular file or is over ocStoreMax, is no
// entry; a malformed one is an error. A nil *stores decodes the store every time.
func (c *stores) lookup(storePath, id, path string) (string, *storeEntry, error) {
	sf, err := c.load(storePath)
	if err != nil || sf == nil {
		return "", nil, err
	}
	var best *keyedEntry
	for _, ke := range []keyedEntry{sf.byID[id], sf.byFile[filepath.Base(path)]} {
		if ke.key == "" || (id == "" && ke.e.SessionID == "" && ke.e.SessionFile == "") {
			continue
		}
		if best == nil || len(ke.key) < len(best.key) || (len(ke.key) == len(best.key) && ke.key < best.key) {
			best = &ke
		}
	}
	if best == nil {
		return "", nil, nil
	}
	e := best.e
	if e.ParentSessionID == "" && e.SpawnedBy != "" {
		e.ParentSessionID = sf.idOfKey[e.SpawnedBy]
	}
	return best.key, &e, nil
}

// fileStamp is what says a small store file changed: its size, mtime and inode.
type fileStamp struct {
	size, mtime int64
	ino         uint64
}

// stampOf is path's stamp, ok false where it does not exist, is not a regular file (a link
// is not followed) or is over ocStoreMax; what names the file in an error.
func stampOf(path, what string) (fileStamp, bool, error) {
	fi, err := os.Lstat(path) //nolint:gosec // a store beside the transcripts being read
	if errors.Is(err, fs.ErrNotExist) {
		return fileStamp{}, false, nil
	}
	if err != nil {
		return fileStamp{}, false, fmt.Errorf("%s: %w", what, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > ocStoreMax {
		return fileStamp{}, false, nil
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st, true, nil
}

func (c *stores) load(storePath string) (*storeFile, error) {
	stamp, ok, err := stampOf(storePath, "session store")
	if !ok || err != nil {
		return nil, err
	}
	if c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if sf := c.m[storePath]; sf != nil && sf.fileStamp == stamp {
			return sf, nil
		}
	}
	f, err := os.OpenFile(storePath, os.O_RDONLY|syscall.O_NOFOLLOW, 0) //nolint:gosec // beside the transcript being read
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("session store: %w", err)
	}
	defer func() { _ = f.Close() }()
	var store map[string]storeEntry
	if err := json.NewDecoder(f).Decode(&store); err != nil {
		return nil, fmt.Errorf("session store %s: %w", storePath, err)
	}
	sf := &storeFile{fileStamp: stamp,
		byID: map[string]keyedEntry{}, byFile: map[string]keyedEntry{}, idOfKey: map[string]string{}}
	for key, e := range store {
		sf.idOfKey[key] = e.SessionID
		ke := keyedEntry{key: key, e: e}
		if e.SessionID != "" {
			better(sf.byID, e.SessionID, ke)
		}
		if e.SessionFile != "" {
			better(sf.byFile, filepath.Base(e.SessionFile), ke)
		}
	}
	if c != nil {
		c.m[storePath] = sf
	}
	return sf, nil
}
