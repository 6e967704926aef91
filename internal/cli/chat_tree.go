package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/transcript"
)

// treeIndex is the parent → children index of a transcript, built in one pass (File.Children
// scans the whole file per call, which is quadratic over a tree).
type treeIndex struct {
	roots    []*transcript.Entry
	children map[*transcript.Entry][]*transcript.Entry
}

// indexTree follows the reader's parent rules: a null, unknown or self parent makes a root.
func indexTree(f *transcript.File) treeIndex {
	roots, children := f.ChildIndex()
	return treeIndex{roots: roots, children: children}
}

// treeNode is one entry of `chat tree`.
type treeNode struct {
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
	// depth is the indentation of the table drawing.
	depth int
}

// chatTree is the output of `chat tree`.
type chatTree struct {
	SessionID string      `json:"sessionId"`
	LeafID    string      `json:"leafId"`
	Roots     []string    `json:"roots"`
	Entries   []*treeNode `json:"entries"`
}

// buildTree lists the entries depth first from the roots (children in file order). A node is
// indented one level deeper than its parent only where the parent branches, so a long linear
// conversation stays flush left.
func buildTree(f *transcript.File) (*chatTree, error) {
	idx := indexTree(f)
	labels := f.Labels()
	active := map[*transcript.Entry]bool{}
	for _, e := range f.Path("") {
		active[e] = true
	}
	out := &chatTree{SessionID: f.Header.ID, Roots: []string{}, Entries: make([]*treeNode, 0, len(f.Entries))}
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
			n := &treeNode{
				ID: it.e.ID, Type: it.e.Type, Role: it.e.Role, Timestamp: it.e.Timestamp,
				Label: labels[it.e.ID], Children: []string{}, Active: active[it.e], depth: it.depth,
			}
			if it.e.ParentID != "" {
				p := it.e.ParentID
				n.ParentID = &p
			}
			kids := idx.children[it.e]
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
	if len(idx.roots) > 1 {
		d0 = 1
	}
	for i := len(idx.roots) - 1; i >= 0; i-- {
		stack = append(stack, item{idx.roots[i], d0})
	}
	for _, r := range idx.roots {
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

// treeTable draws the tree: `*` marks the active path, `<- leaf` the active leaf.
func treeTable(w io.Writer, t *chatTree) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ENTRY\tTYPE\tLABEL\tPREVIEW")
	for _, n := range t.Entries {
		mark := " "
		if n.Active {
			mark = "*"
		}
		typ := n.Type
		if n.Role != "" {
			typ += "/" + n.Role
		}
		label := n.Label
		if label == "" {
			label = "-"
		}
		pv := n.Preview
		if n.ID == t.LeafID {
			pv += "  <- leaf"
		}
		fmt.Fprintf(tw, "%s %s%s\t%s\t%s\t%s\n", mark, strings.Repeat("  ", n.depth), n.ID, typ, oneLine(label, 40), pv)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write tree: %w", err)
	}
	return nil
}

// writeTreeJSON prints t exactly as printJSON would, but encodes one entry at a time: the tree
// of a large transcript would otherwise be held twice more (compact and indented) as JSON.
func writeTreeJSON(out io.Writer, t *chatTree) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if len(t.Entries) == 0 {
		if err := enc.Encode(t); err != nil {
			return fmt.Errorf("encode tree: %w", err)
		}
		_, err := out.Write(buf.Bytes())
		return writeErr(err)
	}
	head := *t
	head.Entries = []*treeNode{}
	if err := enc.Encode(head); err != nil {
		return fmt.Errorf("encode tree: %w", err)
	}
	// "entries" is the last field: its empty array is where the entries go.
	const tail = "[]\n}\n"
	if !bytes.HasSuffix(buf.Bytes(), []byte(tail)) {
		return errors.New("encode tree: unexpected layout")
	}
	// A bufio.Writer keeps its first error and Flush returns it.
	w := bufio.NewWriterSize(out, 64<<10)
	_, _ = w.Write(buf.Bytes()[:buf.Len()-len(tail)])
	_ = w.WriteByte('[')
	// A member of "entries" sits two levels deep.
	enc.SetIndent("    ", "  ")
	for i, n := range t.Entries {
		buf.Reset()
		if err := enc.Encode(n); err != nil {
			return fmt.Errorf("encode tree: %w", err)
		}
		if i > 0 {
			_ = w.WriteByte(',')
		}
		_, _ = w.WriteString("\n    ")
		_, _ = w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	}
	_, _ = w.WriteString("\n  ]\n}\n")
	return writeErr(w.Flush())
}

func writeErr(err error) error {
	if err != nil {
		return fmt.Errorf("write tree: %w", err)
	}
	return nil
}

func (a *app) chatTreeCmd() *cobra.Command {
	var file, format string
	cmd := &cobra.Command{
		Use:   "tree KEY|SESSIONID|--file PATH",
		Short: "Print the entry tree of a chat (branches, labels, the active leaf)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.chatTarget(cmd.Context(), args, file)
			if err != nil {
				return err
			}
			f, err := openTranscript(t.Path)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			tree, err := buildTree(f)
			if err != nil {
				return err
			}
			if format == formatTable {
				return treeTable(a.env.Stdout, tree)
			}
			return writeTreeJSON(a.env.Stdout, tree)
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "read this transcript file instead of a chat of the store")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}
