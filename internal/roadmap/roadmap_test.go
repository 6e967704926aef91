package roadmap_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/roadmap"
)

// TestStore: roadmaps and items persist across a reopen in a private file, changes wake the
// roadmap's subscribers (and not another's), an unchanged update is no change, and bad input
// is INVALID_ARGUMENT.
func TestStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "roadmaps.json")
	s, err := roadmap.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := s.Create("ship")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := s.Create("other")
	ch, stop := s.Subscribe(rm.ID)
	defer stop()
	otherCh, stopOther := s.Subscribe(other.ID)
	defer stopOther()
	it, err := s.AddItem(rm.ID, "docs", "")
	if err != nil || it.Status != roadmap.Todo || it.Version != 1 {
		t.Fatalf("item %+v %v", it, err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("no change told")
	}
	select {
	case <-otherCh:
		t.Fatal("another roadmap's subscriber was told")
	default:
	}
	if it, err = s.UpdateItem(rm.ID, it.ID, "", roadmap.Done); err != nil || it.Version != 2 {
		t.Fatalf("update %+v %v", it, err)
	}
	<-ch
	if again, _ := s.UpdateItem(rm.ID, it.ID, "", roadmap.Done); again.Version != 2 {
		t.Fatalf("an unchanged update counted: %+v", again)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file %v %v", fi, err)
	}
	s2, err := roadmap.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Get(rm.ID)
	if err != nil || len(got.Items) != 1 || got.Items[0].Status != roadmap.Done || got.Title != "ship" || len(s2.List()) != 2 {
		t.Fatalf("after a reopen %+v %v", got, err)
	}
	for name, err := range map[string]error{
		"two lines": func() error { _, err := s.Create("a\nb"); return err }(),
		"status":    func() error { _, err := s.AddItem(rm.ID, "x", "later"); return err }(),
		"no map":    func() error { _, err := s.Get("nope"); return err }(),
	} {
		if abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := os.WriteFile(path, []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := roadmap.Open(path, nil); err == nil {
		t.Fatal("a torn file opened")
	}
}
