package chatstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/nexus-run/nexus/internal/fsutil"
)

// BlobRef is what an entry keeps in place of a member value bigger than MaxInlineValue: the
// value itself is in <sessions dir>/<Path>. Upstream reports of sessions.json growing without
// bound came from such per-entry blobs (system prompt reports, skill snapshots); relocating
// them keeps the index small and listing fast.
type BlobRef struct {
	Path   string `json:"$blob"` // relative to the sessions directory: blobs/<name>.json
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

var blobName = regexp.MustCompile(`^blobs/[A-Za-z0-9._-]{1,200}\.json$`)

// parseBlobRef recognizes a stored reference: an object with exactly the members $blob,
// bytes and sha256, $blob naming a file under blobs/.
func parseBlobRef(v json.RawMessage) (BlobRef, bool) {
	if len(v) == 0 || v[0] != '{' || !bytes.Contains(v, []byte(`"$blob"`)) {
		return BlobRef{}, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil || len(m) != 3 {
		return BlobRef{}, false
	}
	var ref BlobRef
	if json.Unmarshal(v, &ref) != nil || !blobName.MatchString(ref.Path) || len(ref.SHA256) != 64 {
		return BlobRef{}, false
	}
	return ref, true
}

func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 64 {
			break
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// writeBlob stores v for (sessionID, member) and returns its reference. The file name carries
// the content hash, so a crash between the blob write and the index write never leaves the
// index pointing at other content.
func (s *Store) writeBlob(sessionID, member string, v json.RawMessage) (BlobRef, error) {
	sum := sha256.Sum256(v)
	h := hex.EncodeToString(sum[:])
	rel := "blobs/" + safeName(sessionID) + "-" + safeName(member) + "-" + h[:16] + ".json"
	ref := BlobRef{Path: rel, Bytes: int64(len(v)), SHA256: h}
	if err := fsutil.MkdirPrivate(filepath.Join(s.dir, "blobs")); err != nil {
		return BlobRef{}, err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(s.dir, filepath.FromSlash(rel)), v); err != nil {
		return BlobRef{}, fmt.Errorf("write blob for %s: %w", member, err)
	}
	return ref, nil
}

// ReadBlob returns the value a BlobRef stands for, checking its hash.
func (s *Store) ReadBlob(ref BlobRef) (json.RawMessage, error) {
	if !blobName.MatchString(ref.Path) {
		return nil, fmt.Errorf("%w: blob path %q", ErrInvalid, ref.Path)
	}
	path := filepath.Join(s.dir, filepath.FromSlash(ref.Path))
	data, err := fsutil.ReadFileNoFollow(path)
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", path, err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil, fmt.Errorf("%w blob %s: content does not match its sha256", ErrCorrupt, path)
	}
	return data, nil
}

// removeBlobUnlessUsed deletes a blob file no record of recs refers to any more. Blobs are
// index data, not transcripts, so they are removed rather than archived.
func (s *Store) removeBlobUnlessUsed(ref BlobRef, recs map[string]record) {
	for _, r := range recs {
		for _, v := range r {
			if other, ok := parseBlobRef(v); ok && other.Path == ref.Path {
				return
			}
		}
	}
	s.removeBlob(ref)
}

// removeBlob deletes a blob file; a blob left behind wastes space, nothing more.
func (s *Store) removeBlob(ref BlobRef) {
	if !blobName.MatchString(ref.Path) {
		return
	}
	_ = os.Remove(filepath.Join(s.dir, filepath.FromSlash(ref.Path))) // #nosec G703 -- ref.Path matched blobName: a plain name under blobs/
}
