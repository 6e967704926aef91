package conversation

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/nexus-run/nexus/internal/abi"
)

// Show describes the chat ref.
func (s *Service) Show(_ context.Context, ref string) (*Show, error) {
	_, c, err := s.lookup(ref)
	if err != nil {
		return nil, err
	}
	return show(c)
}

// History builds the context of the chat ref.
func (s *Service) History(_ context.Context, ref string, opts HistoryOptions) (*History, error) {
	if opts.Limit < 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "the history limit must not be negative")
	}
	_, c, err := s.lookup(ref)
	if err != nil {
		return nil, err
	}
	return history(c, opts)
}

// Tree lists the entries of the chat ref.
func (s *Service) Tree(_ context.Context, ref string) (*Tree, error) {
	_, c, err := s.lookup(ref)
	if err != nil {
		return nil, err
	}
	return treeOf(c)
}

// Export writes the chat ref in format to w.
func (s *Service) Export(_ context.Context, ref string, format ExportFormat, w io.Writer) error {
	if err := checkFormat(format); err != nil {
		return err
	}
	_, c, err := s.lookup(ref)
	if err != nil {
		return err
	}
	return export(c, format, w)
}

func treeOf(c chat) (*Tree, error) {
	f, err := openTranscript(c.Path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return buildTree(f)
}

func checkFormat(format ExportFormat) error {
	if !format.Valid() {
		return abi.Errorf(abi.CodeInvalidArgument, "", "unknown export format %q (want jsonl, md or html)", format)
	}
	return nil
}

// Files reads transcript files named by path, outside any store: nothing is imported or
// written. A path is read where the caller runs, so a gateway never serves Files: a client
// must not name files on the gateway's machine.
type Files struct{}

var _ Reader = Files{}

func fileChat(path string) (chat, error) {
	if path == "" {
		return chat{}, abi.Errorf(abi.CodeInvalidArgument, "", "name a transcript file")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return chat{}, fmt.Errorf("resolve %s: %w", path, err)
	}
	return chat{Path: abs}, nil
}

// Show describes the transcript at path.
func (Files) Show(_ context.Context, path string) (*Show, error) {
	c, err := fileChat(path)
	if err != nil {
		return nil, err
	}
	return show(c)
}

// History builds the context of the transcript at path.
func (Files) History(_ context.Context, path string, opts HistoryOptions) (*History, error) {
	c, err := fileChat(path)
	if err != nil {
		return nil, err
	}
	return history(c, opts)
}

// Tree lists the entries of the transcript at path.
func (Files) Tree(_ context.Context, path string) (*Tree, error) {
	c, err := fileChat(path)
	if err != nil {
		return nil, err
	}
	return treeOf(c)
}

// Export writes the transcript at path in format to w.
func (Files) Export(_ context.Context, path string, format ExportFormat, w io.Writer) error {
	if err := checkFormat(format); err != nil {
		return err
	}
	c, err := fileChat(path)
	if err != nil {
		return err
	}
	return export(c, format, w)
}
