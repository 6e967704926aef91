package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nexus-run/nexus/internal/agent/permission"
)

// Limits of the file tools' output and input.
const (
	// MaxReadBytes is the largest file read_file, edit_file and copy_file read whole, and the
	// largest file grep searches.
	MaxReadBytes = 10 << 20
	// DefaultReadLines is read_file's default limit.
	DefaultReadLines = 2000
	// MaxLineChars clips each line read_file and grep print.
	MaxLineChars = 2000
	// MaxOutputBytes bounds the text a file tool returns.
	MaxOutputBytes = 256 << 10
)

// Builtins returns the file tools deciding with perm: read_file, write_file, edit_file,
// copy_file, list_dir, glob and grep (bash is NewBash: it needs a shell manager).
func Builtins(perm *permission.Checker) []Tool {
	return []Tool{&readFile{perm}, &writeFile{perm}, &editFile{perm}, &copyFile{perm}, &listDir{perm}, &globTool{perm}, &grepTool{perm}}
}

// readAll reads a decided path whole, refusing what is not a regular file or is too big.
func readAll(p permission.Path) ([]byte, error) {
	f, err := p.Open()
	if err != nil {
		return nil, err //nolint:wrapcheck // Path's errors name the argument
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %q: %w", p.Arg, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%q is not a regular file", p.Arg)
	}
	if fi.Size() > MaxReadBytes {
		return nil, fmt.Errorf("%q holds %d bytes, more than the %d MB this tool reads", p.Arg, fi.Size(), MaxReadBytes>>20)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxReadBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", p.Arg, err)
	}
	if len(data) > MaxReadBytes {
		return nil, fmt.Errorf("%q grew past %d MB while being read", p.Arg, MaxReadBytes>>20)
	}
	return data, nil
}

// writeMode is the mode of a file write_file creates: project files, readable as any other the
// user's editor makes.
const writeMode fs.FileMode = 0o644

func clipLine(s string) string {
	if len(s) > MaxLineChars {
		return s[:MaxLineChars] + " [line clipped]"
	}
	return s
}

// --- read_file

type readFile struct{ perm *permission.Checker }

type readFileArgs struct {
	Path   string `json:"path" jsonschema:"file to read, relative to the workspace or absolute"`
	Offset int    `json:"offset,omitempty" jsonschema:"first line to return, counting from 1 (default 1)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"how many lines to return (default 2000)"`
}

func (t *readFile) Spec() Spec {
	return Spec{Name: "read_file",
		Description: "Read a text file's lines, numbered. offset and limit select a window of lines (default the first 2000); long lines are clipped.",
		Schema: schemaFor[readFileArgs](func(s *jsonschema.Schema) {
			s.Properties["path"].MinLength = ptr(1)
			s.Properties["offset"].Minimum = ptr(1.0)
			s.Properties["limit"].Minimum = ptr(1.0)
		}),
		Paths: Paths{Reads: []string{"path"}, Show: []string{"path"}}}
}

func (t *readFile) Run(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a readFileArgs
	if err := decodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	p, err := resolve(ctx, t.perm, "read_file", a.Path, permission.Read)
	if err != nil {
		return Result{}, err //nolint:wrapcheck // the refusal is the message
	}
	f, err := p.Open()
	if err != nil {
		return Result{}, err //nolint:wrapcheck // Path's errors name the argument
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return Result{}, fmt.Errorf("%q is not a regular file", a.Path)
	}
	if a.Offset < 1 {
		a.Offset = 1
	}
	if a.Limit < 1 {
		a.Limit = DefaultReadLines
	}
	var b strings.Builder
	r := bufio.NewReader(io.LimitReader(f, MaxReadBytes))
	n, shown := 0, 0
	more := false
	for {
		line, err := r.ReadString('\n')
		if line == "" && err != nil {
			break
		}
		n++
		if n < a.Offset {
			continue
		}
		if shown == a.Limit || b.Len() > MaxOutputBytes {
			more = true
			break
		}
		fmt.Fprintf(&b, "%6d\t%s\n", n, clipLine(strings.TrimRight(line, "\r\n")))
		shown++
	}
	if shown == 0 {
		if n == 0 {
			return Result{Output: "(empty file)"}, nil
		}
		return Result{Output: fmt.Sprintf("(the file has %d lines; offset %d is past its end)", n, a.Offset)}, nil
	}
	if more {
		fmt.Fprintf(&b, "(more lines follow: read again with offset %d)\n", a.Offset+shown)
	}
	return Result{Output: b.String()}, nil
}

// --- write_file

type writeFile struct{ perm *permission.Checker }

type writeFileArgs struct {
	Path    string `json:"path" jsonschema:"file to write, relative to the workspace or absolute; created with its directories, replaced if it exists"`
	Content string `json:"content" jsonschema:"the file's whole new content"`
}

func (t *writeFile) Spec() Spec {
	return Spec{Name: "write_file", Description: "Write a file's whole content, creating it and its parent directories or replacing it.",
		Schema: schemaFor[writeFileArgs](func(s *jsonschema.Schema) { s.Properties["path"].MinLength = ptr(1) }),
		Paths:  Paths{Writes: []string{"path"}, Show: []string{"path"}}}
}

func (t *writeFile) Run(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a writeFileArgs
	if err := decodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	p, err := resolve(ctx, t.perm, "write_file", a.Path, permission.Write)
	if err != nil {
		return Result{}, err //nolint:wrapcheck // the refusal is the message
	}
	if err := p.WriteFile([]byte(a.Content), writeMode); err != nil {
		return Result{}, err //nolint:wrapcheck // Path's errors name the argument
	}
	return Result{Output: fmt.Sprintf("wrote %d bytes to %s", len(a.Content), a.Path)}, nil
}

// --- edit_file

type editFile struct{ perm *permission.Checker }

type editFileArgs struct {
	Path       string `json:"path" jsonschema:"file to edit, relative to the workspace or absolute"`
	OldString  string `json:"old_string" jsonschema:"exact text to replace; it must occur exactly once unless replace_all is true"`
	NewString  string `json:"new_string" jsonschema:"text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence"`
}

func (t *editFile) Spec() Spec {
	return Spec{Name: "edit_file",
		Description: "Replace exact text in a file. old_string must occur exactly once (include surrounding lines to make it unique), or set replace_all.",
		Schema: schemaFor[editFileArgs](func(s *jsonschema.Schema) {
			s.Properties["path"].MinLength = ptr(1)
			s.Properties["old_string"].MinLength = ptr(1)
		}),
		Paths: Paths{Reads: []string{"path"}, Writes: []string{"path"}, Show: []string{"path"}}}
}

func (t *editFile) Run(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a editFileArgs
	if err := decodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	if a.OldString == "" {
		return Result{}, fmt.Errorf("%w: old_string is empty", ErrArguments)
	}
	p, err := resolve(ctx, t.perm, "edit_file", a.Path, permission.Write)
	if err != nil {
		return Result{}, err //nolint:wrapcheck // the refusal is the message
	}
	data, err := readAll(p)
	if err != nil {
		return Result{}, err
	}
	n := bytes.Count(data, []byte(a.OldString))
	switch {
	case n == 0:
		return Result{}, fmt.Errorf("old_string does not occur in %s", a.Path)
	case n > 1 && !a.ReplaceAll:
		return Result{}, fmt.Errorf("old_string occurs %d times in %s: include more context to make it unique, or set replace_all", n, a.Path)
	}
	if !a.ReplaceAll {
		n = 1
	}
	out := bytes.Replace(data, []byte(a.OldString), []byte(a.NewString), n)
	if err := p.WriteFile(out, writeMode); err != nil {
		return Result{}, err //nolint:wrapcheck // Path's errors name the argument
	}
	return Result{Output: fmt.Sprintf("replaced %d occurrence(s) in %s", n, a.Path)}, nil
}

// --- copy_file

type copyFile struct{ perm *permission.Checker }

type copyFileArgs struct {
	Source      string `json:"source" jsonschema:"file to copy"`
	Destination string `json:"destination" jsonschema:"where to copy it (a file path; its directories are created)"`
	Overwrite   bool   `json:"overwrite,omitempty" jsonschema:"replace the destination if it exists"`
}

func (t *copyFile) Spec() Spec {
	return Spec{Name: "copy_file", Description: "Copy a file to a new path.",
		Schema: schemaFor[copyFileArgs](func(s *jsonschema.Schema) {
			s.Properties["source"].MinLength = ptr(1)
			s.Properties["destination"].MinLength = ptr(1)
		}),
		Paths: Paths{Reads: []string{"source"}, Writes: []string{"destination"}, Show: []string{"source", "destination"}}}
}

func (t *copyFile) Run(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a copyFileArgs
	if err := decodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	src, err := resolve(ctx, t.perm, "copy_file", a.Source, permission.Read)
	if err != nil {
		return Result{}, fmt.Errorf("source: %w", err)
	}
	dst, err := resolve(ctx, t.perm, "copy_file", a.Destination, permission.Write)
	if err != nil {
		return Result{}, fmt.Errorf("destination: %w", err)
	}
	if !a.Overwrite {
		if _, err := dst.Stat(); err == nil {
			return Result{}, fmt.Errorf("destination %s exists: set overwrite to replace it", a.Destination)
		}
	}
	data, err := readAll(src)
	if err != nil {
		return Result{}, err
	}
	if err := dst.WriteFile(data, writeMode); err != nil {
		return Result{}, err //nolint:wrapcheck // Path's errors name the argument
	}
	return Result{Output: fmt.Sprintf("copied %d bytes from %s to %s", len(data), a.Source, a.Destination)}, nil
}

// --- list_dir

// MaxListEntries bounds list_dir's answer.
const MaxListEntries = 1000

type listDir struct{ perm *permission.Checker }

type listDirArgs struct {
	Path string `json:"path,omitempty" jsonschema:"directory to list (default the workspace)"`
}

func (t *listDir) Spec() Spec {
	return Spec{Name: "list_dir", Description: "List a directory: one entry a line, directories ending in /, symbolic links in @.",
		Schema: schemaFor[listDirArgs](nil), Paths: Paths{Reads: []string{"path"}, Show: []string{"path"}}}
}

func (t *listDir) Run(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a listDirArgs
	if err := decodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	if a.Path == "" {
		a.Path = "."
	}
	p, err := resolve(ctx, t.perm, "list_dir", a.Path, permission.Read)
	if err != nil {
		return Result{}, err //nolint:wrapcheck // the refusal is the message
	}
	es, err := p.ReadDir()
	if err != nil {
		return Result{}, err //nolint:wrapcheck // Path's errors name the argument
	}
	var b strings.Builder
	for i, e := range es {
		if i == MaxListEntries {
			fmt.Fprintf(&b, "(%d more entries not shown)\n", len(es)-i)
			break
		}
		b.WriteString(e.Name())
		switch {
		case e.IsDir():
			b.WriteByte('/')
		case e.Type()&fs.ModeSymlink != 0:
			b.WriteByte('@')
		}
		b.WriteByte('\n')
	}
	if len(es) == 0 {
		return Result{Output: "(empty directory)"}, nil
	}
	return Result{Output: b.String()}, nil
}
