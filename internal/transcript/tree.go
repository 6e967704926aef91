package transcript

import "strings"

// index builds the id lookup. With duplicate ids the later entry wins, as in
// pi's Map-based index.
func (f *File) index() {
	f.byID = make(map[string]*Entry, len(f.Entries))
	for _, e := range f.Entries {
		if e.ID != "" {
			f.byID[e.ID] = e
		}
	}
}

// Entry returns the entry with the given id, or nil.
func (f *File) Entry(id string) *Entry {
	if f.byID == nil {
		f.index()
	}
	return f.byID[id]
}

// parent returns e's parent, or nil when e is a root: parentId null, unknown
// (an orphan) or e itself.
func (f *File) parent(e *Entry) *Entry {
	if e.ParentID == "" || e.ParentID == e.ID {
		return nil
	}
	p := f.Entry(e.ParentID)
	if p == e {
		return nil
	}
	return p
}

// Leaf returns the default leaf: the last entry in file order (nil for a
// file without entries).
func (f *File) Leaf() *Entry {
	if len(f.Entries) == 0 {
		return nil
	}
	return f.Entries[len(f.Entries)-1]
}

// Roots returns the entries without a parent (null, unknown or self parent),
// in file order.
func (f *File) Roots() []*Entry {
	var out []*Entry
	for _, e := range f.Entries {
		if f.parent(e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// Children returns the entries whose parent is id, in file order.
func (f *File) Children(id string) []*Entry {
	var out []*Entry
	p := f.Entry(id)
	if p == nil {
		return nil
	}
	for _, e := range f.Entries {
		if e != p && f.parent(e) == p {
			out = append(out, e)
		}
	}
	return out
}

// Path returns the entries from the root to the leaf with id leafID. An empty
// or unknown leafID means the default leaf (the last entry). A parent cycle
// ends the walk.
func (f *File) Path(leafID string) []*Entry {
	leaf := f.Entry(leafID)
	if leaf == nil {
		leaf = f.Leaf()
	}
	if leaf == nil {
		return nil
	}
	seen := map[*Entry]bool{}
	var rev []*Entry
	for e := leaf; e != nil && !seen[e]; e = f.parent(e) {
		seen[e] = true
		rev = append(rev, e)
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// Labels returns the label of each labelled entry id: label entries in file
// order, the last one per target wins, an absent or empty label clears it.
func (f *File) Labels() map[string]string {
	out := map[string]string{}
	for _, e := range f.Entries {
		if e.Type != "label" || e.TargetID() == "" {
			continue
		}
		if e.Label() != nil && *e.Label() != "" {
			out[e.TargetID()] = *e.Label()
		} else {
			delete(out, e.TargetID())
		}
	}
	return out
}

// SessionName returns the display name set by the last session_info entry
// (trimmed), or "" when none is set or the last one cleared it.
func (f *File) SessionName() string {
	for i := len(f.Entries) - 1; i >= 0; i-- {
		e := f.Entries[i]
		if e.Type == "session_info" {
			if e.Name() == nil {
				return ""
			}
			return strings.TrimSpace(*e.Name())
		}
	}
	return ""
}

// ChildIndex returns the roots and every entry's children, both in file
// order, in one pass (Children and Roots scan the whole file per call).
func (f *File) ChildIndex() (roots []*Entry, children map[*Entry][]*Entry) {
	children = map[*Entry][]*Entry{}
	for _, e := range f.Entries {
		if p := f.parent(e); p != nil {
			children[p] = append(children[p], e)
		} else {
			roots = append(roots, e)
		}
	}
	return roots, children
}
