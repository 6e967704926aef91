package index_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/index"
)

// TestSearchByOrigin: the index reads where each message of a nexus conversation came from
// (its user entry's nexusOrigin) and search --origin keeps the hits of the turns whose prompt
// came from there, by kind, kind:id or channel; a turn without an origin (pi's own) matches
// none. An append read later is filtered as well.
func TestSearchByOrigin(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	dir := e.roots["nexus"][0]
	store, err := chatstore.Open(dir, chatstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Create(ctx, "agent:main:main", nil)
	if err != nil {
		t.Fatal(err)
	}
	path := store.TranscriptPath(s.SessionID)
	user := func(id, parent, text, origin string) string {
		o := ""
		if origin != "" {
			o = `,"nexusOrigin":` + origin
		}
		return fmt.Sprintf(`{"type":"message","id":%q,"parentId":%s,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":%q,"timestamp":1}%s}`, id, parent, text, o)
	}
	reply := func(id, parent, text string) string {
		return fmt.Sprintf(`{"type":"message","id":%q,"parentId":%q,"timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":%q}],"stopReason":"stop"}}`, id, parent, text)
	}
	write(t, path, lines(
		fmt.Sprintf(`{"type":"session","version":3,"id":%q,"timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}`, s.SessionID),
		user("u1", "null", "pelican from the terminal", `{"kind":"cli"}`),
		reply("a1", "u1", "pelican noted"),
		user("u2", `"a1"`, "pelican from telegram", `{"kind":"webhook","id":"relay","channel":"telegram","peer":"alice","chatType":"direct"}`),
		reply("a2", "u2", "pelican answered on telegram"),
		user("u3", `"a2"`, "pelican without origin", ""),
		reply("a3", "u3", "pelican again"),
	))
	e.sync("nexus")
	hits := func(origin string) string {
		t.Helper()
		got, err := e.ix.Search(ctx, index.SearchOptions{Query: "pelican", Origin: origin})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, h := range got {
			ids = append(ids, h.MessageID)
		}
		sort.Strings(ids)
		return strings.Join(ids, ",")
	}
	for _, tc := range []struct{ origin, want string }{
		{"", "a1,a2,a3,u1,u2,u3"},
		{"cli", "a1,u1"},
		{"webhook", "a2,u2"},
		{"WEBHOOK:relay", "a2,u2"},
		{"telegram", "a2,u2"},
		{"webhook:other", ""},
		{"cron", ""},
	} {
		if got := hits(tc.origin); got != tc.want {
			t.Errorf("--origin %q: %s, want %s", tc.origin, got, tc.want)
		}
	}
	// A turn appended later, read from the file's offset.
	appendFile(t, path, lines(
		user("u4", `"a3"`, "pelican from the job", `{"kind":"cron","id":"digest"}`),
		reply("a4", "u4", "pelican digest"),
	))
	e.sync("nexus")
	if got := hits("cron:digest"); got != "a4,u4" {
		t.Errorf("--origin cron:digest after an append: %s", got)
	}
}
