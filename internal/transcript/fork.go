package transcript

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nexus-run/nexus/internal/fsutil"
)

// Fork writes a new transcript at dstPath holding the root-to-leaf path of
// the transcript at srcPath (pi's createBranchedSession) and returns a Writer
// continuing it. leafID "" means the source's default leaf (its last entry).
// The source may be any pi file, in a store or not; v1 and v2 sources are
// migrated on the way (the fork is v3).
//
// The new header has a new session id, the source's cwd and parentSession =
// the absolute source path. The path's entries are copied as their original
// lines, byte for byte (migrated lines for v1/v2 sources), except label
// entries at its tail; the labels in effect on the copied entries are then
// re-appended at the end as new label entries, with their original
// timestamps, in the order pi keeps them (pi's createBranchedSession drops
// every label entry, which breaks the parent chain when a label sits in the
// middle of the path; nexus keeps those). The file is written to a temporary name, synced, and linked
// to dstPath, which is never overwritten (an existing dstPath fails with
// fs.ErrExist), then the directory is synced.
func Fork(srcPath, leafID, dstPath string, opts WriterOptions) (*Writer, error) {
	opts = opts.withDefaults()
	src, err := Open(srcPath)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", srcPath, err)
	}
	defer func() { _ = src.Close() }()
	if leafID != "" && src.Entry(leafID) == nil {
		return nil, fmt.Errorf("fork %s at %q: %w", srcPath, leafID, ErrUnknownEntry)
	}
	path := src.Path(leafID)
	if len(path) == 0 {
		return nil, fmt.Errorf("fork %s: the transcript has no entries", srcPath)
	}
	absSrc, err := filepath.Abs(srcPath)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", srcPath, err)
	}
	now := opts.Now()
	id, err := opts.sessionID(now)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", srcPath, err)
	}
	header, err := headerLine(id, now.UTC().Format(timestampLayout), src.Header.Cwd, absSrc)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", srcPath, err)
	}

	// Label entries at the tail of the path are left out. pi leaves out
	// every label entry, but a label entry is the parent of whatever was
	// appended after it, so dropping one from the middle of the path cuts
	// the chain (pi's fork of a session labelled mid-way loses everything
	// before the label): those are kept.
	end := len(path)
	for end > 0 && path[end-1].Type == "label" {
		end--
	}
	if end == 0 {
		return nil, fmt.Errorf("fork %s: the path holds only labels", srcPath)
	}
	kept := path[:end]
	taken := make(map[string]bool, len(kept))
	inFork := map[string]string{} // labels the kept label entries set
	for _, e := range kept {
		taken[e.ID] = true
		if e.Type == "label" && e.TargetID() != "" {
			if e.Label() != nil && *e.Label() != "" {
				inFork[e.TargetID()] = *e.Label()
			} else {
				delete(inFork, e.TargetID())
			}
		}
	}
	// Then, as pi, the labels in effect on the kept entries, plus a clear
	// for any label a kept entry sets that is not in effect in the source.
	var labels []labelState
	want := map[string]bool{}
	for _, l := range orderedLabels(src) {
		if taken[l.target] {
			labels = append(labels, l)
			want[l.target] = true
		}
	}
	for _, e := range kept {
		if e.Type == "label" && inFork[e.TargetID()] != "" && !want[e.TargetID()] {
			labels = append(labels, labelState{target: e.TargetID(), timestamp: lastLabelTimestamp(src, e.TargetID())})
			want[e.TargetID()] = true
		}
	}
	var labelLines [][]byte
	parent := kept[len(kept)-1].ID
	for _, l := range labels {
		lid, err := newEntryID(opts.Rand, func(s string) bool { return taken[s] })
		if err != nil {
			return nil, fmt.Errorf("fork %s: %w", srcPath, err)
		}
		taken[lid] = true
		fields := []entryField{{"targetId", l.target}}
		if l.label != "" {
			fields = append(fields, entryField{"label", l.label})
		}
		line, err := encodeEntry("label", lid, parent, l.timestamp, fields)
		if err != nil {
			return nil, fmt.Errorf("fork %s: %w", srcPath, err)
		}
		labelLines = append(labelLines, line)
		parent = lid
	}

	err = writeNew(dstPath, func(bw *bufio.Writer) error {
		if _, err := bw.Write(append(header, '\n')); err != nil {
			return err
		}
		if err := src.writeLines(bw, kept); err != nil {
			return err
		}
		for _, l := range labelLines {
			if _, err := bw.Write(append(l, '\n')); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fork %s to %s: %w", srcPath, dstPath, err)
	}
	return OpenWriter(dstPath, opts)
}

func lastLabelTimestamp(f *File, target string) string {
	ts := ""
	for _, e := range f.Entries {
		if e.Type == "label" && e.TargetID() == target {
			ts = e.Timestamp
		}
	}
	return ts
}

type labelState struct {
	target, label, timestamp string
}

// orderedLabels resolves the labels in effect, in the order of pi's
// labelsById map: a target keeps its first position when relabelled and
// moves to the end when cleared and set again.
func orderedLabels(f *File) []labelState {
	var order []string
	cur := map[string]labelState{}
	for _, e := range f.Entries {
		if e.Type != "label" || e.TargetID() == "" {
			continue
		}
		if e.Label() == nil || *e.Label() == "" {
			if _, ok := cur[e.TargetID()]; ok {
				delete(cur, e.TargetID())
				for i, t := range order {
					if t == e.TargetID() {
						order = append(order[:i], order[i+1:]...)
						break
					}
				}
			}
			continue
		}
		if _, ok := cur[e.TargetID()]; !ok {
			order = append(order, e.TargetID())
		}
		cur[e.TargetID()] = labelState{target: e.TargetID(), label: *e.Label(), timestamp: e.Timestamp}
	}
	out := make([]labelState, 0, len(order))
	for _, t := range order {
		out = append(out, cur[t])
	}
	return out
}

// writeNew creates path with the content fill writes, atomically and
// without ever replacing an existing file: a private temporary file in the
// same directory, fsync, link(2) to path (which fails if anything, a
// symlink included, is there), unlink of the temporary name, fsync of the
// directory.
func writeNew(path string, fill func(*bufio.Writer) error) error {
	tmp, err := writeTemp(path, fill)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp) }()
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %w", path, fs.ErrExist)
		}
		return err
	}
	if err := os.Remove(tmp); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(path))
}

// writeTemp writes a private (0600), synced temporary file next to path and
// returns its name.
func writeTemp(path string, fill func(*bufio.Writer) error) (string, error) {
	fh, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", err
	}
	name := fh.Name()
	ok := false
	defer func() {
		if !ok {
			_ = fh.Close()
			_ = os.Remove(name)
		}
	}()
	bw := bufio.NewWriterSize(fh, 1<<20)
	if err := fill(bw); err != nil {
		return "", err
	}
	if err := bw.Flush(); err != nil {
		return "", err
	}
	if err := fh.Sync(); err != nil {
		return "", err
	}
	if err := fh.Close(); err != nil {
		return "", err
	}
	ok = true
	return name, nil
}
