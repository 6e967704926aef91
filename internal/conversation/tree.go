package conversation

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nexus-run/nexus/internal/transcript"
)

// Tree is every entry of a transcript (docs/conversations.md, tree).
type Tree struct {
	SessionID string      `json:"sessionId"`
	LeafID    string      `json:"leafId"`
	Roots     []string    `json:"roots"`
	Entries   []*TreeNode `json:"entries"`
}

// TreeNode is one entry of a Tree.
type TreeNode struct {
	ID        string   `json:"id"`
	ParentID  *string  `json:"parentId"`
	Type      string   `json:"type"`
	Role      string   `json:"role,omitempty"`
	Timestamp string   `json:"timestamp,omitempty"`
	Label     string   `json:"label,omitempty"`
	Preview   string   `json:"preview,omitempty"`
	Children  []string `json:"children"`
	// Active marks the entries on the path from a root to the active leaf.
	Active bool `json:"active"`
	// Depth is how far a drawing indents the entry: one level per branching ancestor (an
	// ancestor with more than one child), plus one under a file with several roots.
	Depth int `json:"depth"`
}

// buildTree lists the entries depth first from the roots (children in file order). A node is
// indented one level deeper than its parent only where the parent branches, so a long linear
// conversation stays flush left.
func buildTree(f *transcript.File) (*Tree, error) {
	roots, children := f.ChildIndex()
	labels := f.Labels()
	active := map[*transcript.Entry]bool{}
	for _, e := range f.Path("") {
		active[e] = true
	}
	out := &Tree{SessionID: f.Header.ID, Roots: []string{}, Entries: make([]*TreeNode, 0, len(f.Entries))}
	if l := f.Leaf(); l != nil {
		out.LeafID = l.ID
	}
	type item struct {
		e     *transcript.Entry
		depth int
	}
	var stack []item
	seen := make(map[*transcript.Entry]bool, len(f.Entries))
	// order lists the entries of out.Entries: their previews are filled in afterwards, reading
	// the messages back in file batches.
	order := make([]*transcript.Entry, 0, len(f.Entries))
	walk := func() {
		for len(stack) > 0 {
			it := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[it.e] {
				continue
			}
			seen[it.e] = true
			n := &TreeNode{
				ID: it.e.ID, Type: it.e.Type, Role: it.e.Role, Timestamp: it.e.Timestamp,
				Label: labels[it.e.ID], Children: []string{}, Active: active[it.e], Depth: it.depth,
			}
			if it.e.ParentID != "" {
				p := it.e.ParentID
				n.ParentID = &p
			}
			kids := children[it.e]
			d := it.depth
			if len(kids) > 1 {
				d++
			}
			for i := len(kids) - 1; i >= 0; i-- {
				stack = append(stack, item{kids[i], d})
			}
			for _, k := range kids {
				n.Children = append(n.Children, k.ID)
			}
			out.Entries = append(out.Entries, n)
			order = append(order, it.e)
		}
	}
	d0 := 0
	if len(roots) > 1 {
		d0 = 1
	}
	for i := len(roots) - 1; i >= 0; i-- {
		stack = append(stack, item{roots[i], d0})
	}
	for _, r := range roots {
		out.Roots = append(out.Roots, r.ID)
	}
	walk()
	// Entries on a parent cycle longer than one (a → b → a) hang under no root: each starts a
	// tree of its own so none is hidden.
	for _, e := range f.Entries {
		if !seen[e] {
			out.Roots = append(out.Roots, e.ID)
			stack = append(stack, item{e, 1})
			walk()
		}
	}
	i := 0
	for full, err := range f.FullEntries(order) {
		if err != nil {
			return nil, fmt.Errorf("read entries: %w", err)
		}
		out.Entries[i].Preview = preview(full)
		i++
	}
	return out, nil
}

// WriteJSON writes t as encoding/json would (indented by two spaces when indent is set, else
// compact), one entry at a time: the tree of a large transcript would otherwise be held once
// more as JSON.
func (t *Tree) WriteJSON(out io.Writer, indent bool) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if len(t.Entries) == 0 {
		if err := enc.Encode(t); err != nil {
			return fmt.Errorf("encode tree: %w", err)
		}
		_, err := out.Write(buf.Bytes())
		return writeErr(err)
	}
	head := *t
	head.Entries = []*TreeNode{}
	if err := enc.Encode(head); err != nil {
		return fmt.Errorf("encode tree: %w", err)
	}
	// "entries" is the last field: its empty array is where the entries go.
	tail, sep, end := "[]}\n", ",", "]}\n"
	if indent {
		// A member of "entries" sits two levels deep.
		tail, sep, end = "[]\n}\n", ",\n    ", "\n  ]\n}\n"
		enc.SetIndent("    ", "  ")
	}
	if !bytes.HasSuffix(buf.Bytes(), []byte(tail)) {
		return errors.New("encode tree: unexpected layout")
	}
	// A bufio.Writer keeps its first error and Flush returns it.
	w := bufio.NewWriterSize(out, 64<<10)
	_, _ = w.Write(buf.Bytes()[:buf.Len()-len(tail)])
	_ = w.WriteByte('[')
	for i, n := range t.Entries {
		buf.Reset()
		if err := enc.Encode(n); err != nil {
			return fmt.Errorf("encode tree: %w", err)
		}
		switch {
		case i > 0:
			_, _ = w.WriteString(sep)
		case indent:
			_, _ = w.WriteString("\n    ")
		}
		_, _ = w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	}
	_, _ = w.WriteString(end)
	return writeErr(w.Flush())
}

func writeErr(err error) error {
	if err != nil {
		return fmt.Errorf("write tree: %w", err)
	}
	return nil
}
