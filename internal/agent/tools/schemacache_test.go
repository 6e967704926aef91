package tools_test

import (
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/tools"
)

// TestSchemaCache: registries sharing a cache (a gateway's conversations, several at once)
// still check every call's arguments against the tool's schema.
func TestSchemaCache(t *testing.T) {
	f := newFixture(t)
	cache := tools.NewSchemaCache()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			perm, err := permission.New(permission.Config{Level: permission.YOLO, Workspace: f.ws})
			if err != nil {
				t.Error(err)
				return
			}
			defer func() { _ = perm.Close() }()
			r := tools.NewRegistry(perm)
			r.UseSchemaCache(cache)
			for _, tl := range tools.Builtins(perm) {
				if err := r.Add(tl); err != nil {
					t.Error(err)
					return
				}
			}
			if _, err := r.Prepare("read_file", []byte(`{"path": 7}`), nil); err == nil {
				t.Error("a path that is not a string passed the shared schema")
			}
			if _, err := r.Prepare("read_file", []byte(`{"path":"a.txt","bogus":1}`), nil); err == nil {
				t.Error("an unknown argument passed the shared schema")
			}
			if _, err := r.Prepare("list_dir", []byte(`{}`), nil); err != nil {
				t.Errorf("a valid call: %v", err)
			}
		}()
	}
	wg.Wait()
}
