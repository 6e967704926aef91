package orchestrate

import (
	"reflect"
	"testing"

	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/profile"
)

// TestPowersBound: a child's powers are its parent's intersected with its agent's, field by
// field, and a grandchild's are bounded by the child's (the parent's scopes carried along).
func TestPowersBound(t *testing.T) {
	ws := "/srv/ws"
	parent := OwnPowers(&profile.Profile{ID: "worker", Settings: profile.Settings{Policy: profile.Policy{
		DisabledTools: []string{"write_file"}, AllowedTargets: []string{"parent"},
		AllowedPaths: []string{"/data", "docs"}, BlockedPaths: []string{".env"},
	}}}, permission.Trusted, ws)
	agent := OwnPowers(&profile.Profile{ID: "main", Settings: profile.Settings{Policy: profile.Policy{
		DisabledTools: []string{"bash"}, AllowedPaths: []string{"/data/public", "/other"}, BlockedPaths: []string{"/etc"},
	}}}, permission.YOLO, "")
	agent.Workspace = ""
	child := parent.inherited("agent:worker:main").Bound(agent)
	want := Powers{
		Level: permission.Trusted, Workspace: ws,
		DisabledTools: []string{"bash", "write_file"},
		AllowedPaths:  []string{"/data/public"},
		BlockedPaths:  []string{"/srv/ws/.env", "/etc"},
		AllowedTargets: []TargetScope{
			{From: "agent:worker:main", Allowed: []string{"parent"}},
			{Allowed: []string{"family"}},
		},
	}
	if !reflect.DeepEqual(child, want) {
		t.Fatalf("child\n got %+v\nwant %+v", child, want)
	}
	// The grandchild, of an agent that sets level sandboxed and nothing else.
	grand := child.inherited("agent:main:subagent:1").Bound(Powers{Level: permission.Sandboxed, AllowedTargets: []TargetScope{{Allowed: []string{"family"}}}})
	if grand.Level != permission.Sandboxed || !reflect.DeepEqual(grand.DisabledTools, want.DisabledTools) || len(grand.AllowedTargets) != 3 ||
		grand.AllowedTargets[0].From != "agent:worker:main" || grand.AllowedTargets[1].From != "agent:main:subagent:1" {
		t.Fatalf("grandchild %+v", grand)
	}
	// An agent without a level does not bound it; bounding by the same powers changes nothing.
	if got := child.Bound(Powers{}); got.Level != permission.Trusted {
		t.Errorf("bound by no level: %s", got.Level)
	}
	if got := child.Bound(child); !reflect.DeepEqual(got, child) {
		t.Errorf("bound by itself: %+v", got)
	}
}
