package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/index/source"
)

// The five formats. Each runX writes sessions under its source's root in the layout the
// adapter's DefaultRoots and Discover expect, and counts what the adapter will count.

// args writes a JSON object of string pairs. Values come from the vocabulary, paths and fixed
// commands: none holds a character JSON must escape.
func (g *generator) args(kv ...string) {
	g.w("{")
	for i := 1; i < len(kv); i += 2 {
		if i > 1 {
			g.w(",")
		}
		g.wq(kv[i-1])
		g.w(":")
		g.wq(kv[i])
	}
	g.w("}")
}

// argsString writes the same object as a JSON string (Codex's function_call arguments).
func (g *generator) argsString(kv ...string) {
	g.w(`"{`)
	for i := 1; i < len(kv); i += 2 {
		if i > 1 {
			g.w(",")
		}
		g.w(`\"` + kv[i-1] + `\":\"` + kv[i] + `\"`)
	}
	g.w(`}"`)
}

// usage draws an assistant reply's tokens; cacheRead grows with the context.
func (g *generator) usage(text []byte, calls int, window int64) (in, out, cacheRead, cacheWrite int64) {
	return 3 + g.r.Int64N(2000), int64(len(text)/4+40*calls) + g.r.Int64N(200), window, g.r.Int64N(3000)
}

func usageOf(in, out, cacheRead, cacheWrite int64) source.Usage {
	return source.Usage{Input: in, Output: out, CacheRead: cacheRead, CacheWrite: cacheWrite}
}

// ---- pi, OpenClaw, nexus: pi JSONL v3 (docs/conversations.md) ----

type piDialect struct {
	g                    *generator
	provider, api, model string
	tools                [kindWrite + 1]string
	base, seq            uint32
	parent               string
	window               int64 // tokens in the context so far
	idBuf                [8]byte
}

func newPi(g *generator, shell string) *piDialect {
	models := [][3]string{
		{"anthropic", "anthropic-messages", "claude-sonnet-4-5"},
		{"anthropic", "anthropic-messages", "claude-opus-4-5"},
		{"openai", "openai-responses", "gpt-5.2"},
		{"zai", "openai-completions", "glm-5"},
	}
	m := models[g.r.IntN(len(models))]
	d := &piDialect{g: g, provider: m[0], api: m[1], model: m[2], base: g.r.Uint32()}
	d.tools = [...]string{kindShell: shell, kindRead: "read", kindEdit: "edit", kindGrep: "grep", kindWrite: "write"}
	if shell == "exec" {
		d.tools[kindGrep] = "exec" // OpenClaw has no grep tool: the agent runs rg
	}
	return d
}

// nextID is an 8-hex entry id, distinct for every entry of the file (a bijection of the count).
func (d *piDialect) nextID() string {
	d.seq++
	v := d.base + d.seq*0x9e3779b1
	for i := range d.idBuf {
		d.idBuf[7-i] = hexDigits[v&0xf]
		v >>= 4
	}
	return string(d.idBuf[:])
}

// entry opens an entry line: type, id, parentId, timestamp.
func (d *piDialect) entry(typ string) {
	g := d.g
	id := d.nextID()
	g.w(`{"type":"` + typ + `","id":"` + id + `","parentId":`)
	if d.parent == "" {
		g.w("null")
	} else {
		g.wq(d.parent)
	}
	d.parent = id
	g.w(`,"timestamp":`)
	g.wts()
}

func (d *piDialect) header(id, cwd string) {
	g := d.g
	g.w(`{"type":"session","version":3,"id":"` + id + `","timestamp":`)
	g.wts()
	g.w(`,"cwd":"` + cwd + `"}` + "\n")
	d.entry("model_change")
	g.w(`,"provider":"` + d.provider + `","modelId":"` + d.model + `"}` + "\n")
	d.entry("thinking_level_change")
	g.w(`,"thinkingLevel":"medium"}` + "\n")
}

func (d *piDialect) user(text []byte) {
	g := d.g
	d.entry("message")
	g.w(`,"message":{"role":"user","content":[{"type":"text","text":`)
	g.wqb(text)
	g.w(`}],"timestamp":`)
	g.wi(g.ms())
	g.w("}}\n")
}

func (d *piDialect) assistant(text []byte, calls []toolCall) {
	g := d.g
	d.entry("message")
	g.w(`,"message":{"role":"assistant","content":[`)
	sep := ""
	if g.r.IntN(10) < 4 {
		g.thinking("thinkingSignature")
		sep = ","
	}
	if len(text) > 0 {
		g.w(sep + `{"type":"text","text":`)
		g.wqb(text)
		g.w("}")
		sep = ","
	}
	for i := range calls {
		c := &calls[i]
		g.w(sep + `{"type":"toolCall","id":"` + c.id + `","name":"` + d.tools[c.kind] + `","arguments":`)
		d.arguments(c)
		g.w("}")
		sep = ","
	}
	in, out, cr, cw := g.usage(text, len(calls), d.window)
	d.window += in + out
	g.st.Usage = g.st.Usage.Add(usageOf(in, out, cr, cw))
	g.w(`],"api":"` + d.api + `","provider":"` + d.provider + `","model":"` + d.model + `","usage":{"input":`)
	g.wi(in)
	g.w(`,"output":`)
	g.wi(out)
	g.w(`,"cacheRead":`)
	g.wi(cr)
	g.w(`,"cacheWrite":`)
	g.wi(cw)
	g.w(`,"totalTokens":`)
	g.wi(in + out + cr + cw)
	g.w(`,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":`)
	if len(calls) > 0 {
		g.w(`"toolUse"`)
	} else {
		g.w(`"stop"`)
	}
	g.w(`,"timestamp":`)
	g.wi(g.ms())
	g.w("}}\n")
	for i := range calls {
		c := &calls[i]
		g.tick(30 * time.Second)
		d.entry("message")
		g.w(`,"message":{"role":"toolResult","toolCallId":"` + c.id + `","toolName":"` + d.tools[c.kind] + `","content":[{"type":"text","text":`)
		g.wqb(c.result)
		g.w(`}],"isError":` + strconv.FormatBool(c.isErr) + `,"timestamp":`)
		g.wi(g.ms())
		g.w("}}\n")
	}
}

func (d *piDialect) arguments(c *toolCall) {
	g := d.g
	switch c.kind {
	case kindShell:
		g.args("command", c.cmd)
	case kindRead:
		g.args("path", c.path)
	case kindEdit:
		g.args("path", c.path, "oldText", c.old, "newText", c.new)
	case kindGrep:
		if d.tools[kindGrep] == "exec" {
			g.args("command", "rg -n "+c.cmd+" "+c.path)
		} else {
			g.args("pattern", c.cmd, "path", c.path)
		}
	default:
		g.args("path", c.path, "content", c.new)
	}
}

func (d *piDialect) step(text []byte, calls []toolCall) { d.assistant(text, calls) }
func (d *piDialect) final(text []byte)                  { d.assistant(text, nil) }

// sessionInfo names the session, as pi's /name does.
func (d *piDialect) sessionInfo(name string) {
	d.entry("session_info")
	d.g.w(`,"name":"` + name + `"}` + "\n")
}

// thinking writes a thinking block: text without markers (the adapters do not index thinking)
// and its signature under the format's member name.
func (g *generator) thinking(signature string) {
	g.scratch[2] = g.text(g.scratch[2][:0], g.size(110, 20, 3000), false)
	g.w(`{"type":"thinking","thinking":`)
	g.wqb(g.scratch[2])
	g.w(`,"` + signature + `":"`)
	g.tmp = g.chars(g.tmp[:0], base64Abc, 64)
	g.wb(g.tmp)
	g.w(`"}`)
}

func (g *generator) toolUseID() string { return "toolu_01" + string(g.chars(nil, alnum, 22)) }

// piSession writes one pi-format session to path.
func (g *generator) piSession(path, id, cwd, shell string) error {
	if err := g.create(path); err != nil {
		return err
	}
	d := newPi(g, shell)
	d.header(id, cwd)
	g.conversation(d, g.messages(), cwd, g.toolUseID, nil)
	if g.r.IntN(2) == 0 {
		d.sessionInfo(g.title())
	}
	return g.finish()
}

// runPi: <root>/--<cwd>--/<time>_<id>.jsonl, root standing for ~/.pi/agent/sessions.
func (g *generator) runPi(ctx context.Context) error {
	root := filepath.Join(g.dir, "pi", "agent", "sessions")
	g.st.Roots = []string{root}
	return g.eachSession(ctx, func(bool) error {
		cwd, id := g.project(), g.uuid4()
		dir := "--" + strings.ReplaceAll(strings.TrimPrefix(cwd, "/"), "/", "-") + "--"
		name := strings.ReplaceAll(strings.ReplaceAll(g.now.Format(tsLayout), ":", "-"), ".", "-") + "_" + id + ".jsonl"
		return g.piSession(filepath.Join(root, dir, name), id, cwd, "bash")
	})
}

// eachSession starts sessions (setting the clock) and has one write each, until the source's
// share of the bytes is written. first is set for the first session.
func (g *generator) eachSession(ctx context.Context, one func(first bool) error) error {
	for first := true; ; first = false {
		if more, err := g.more(ctx); !more {
			return err
		}
		g.startSession()
		if err := one(first); err != nil {
			return err
		}
	}
}

// ocEntry is an OpenClaw sessions.json entry.
type ocEntry struct {
	SessionID     string `json:"sessionId"`
	UpdatedAt     int64  `json:"updatedAt"`
	ChatType      string `json:"chatType,omitempty"`
	SessionFile   string `json:"sessionFile"`
	Label         string `json:"label,omitempty"`
	SpawnedBy     string `json:"spawnedBy,omitempty"`
	Model         string `json:"model,omitempty"`
	ModelProvider string `json:"modelProvider,omitempty"`
}

// runOpenClaw: <root>/<agent>/sessions/<id>.jsonl and that directory's sessions.json, root
// standing for ~/.openclaw/agents. One transcript in twenty is an archive (<id>.jsonl.deleted.
// <time>) the store no longer names.
func (g *generator) runOpenClaw(ctx context.Context) error {
	root := filepath.Join(g.dir, "openclaw", "agents")
	g.st.Roots = []string{root}
	agents := []string{"main", "ops", "research"}
	stores := map[string]map[string]ocEntry{}
	n := 0
	err := g.eachSession(ctx, func(bool) error {
		n++
		agent := agents[g.r.IntN(len(agents))]
		dir := filepath.Join(root, agent, "sessions")
		id := g.uuid4()
		path := filepath.Join(dir, id+".jsonl")
		archived := g.r.IntN(20) == 0
		if archived {
			path += ".deleted." + strings.ReplaceAll(g.now.Format(tsLayout), ":", "-")
		}
		if err := g.piSession(path, id, g.project(), "exec"); err != nil || archived {
			return err
		}
		if stores[agent] == nil {
			stores[agent] = map[string]ocEntry{}
		}
		e := ocEntry{SessionID: id, UpdatedAt: g.ms(), SessionFile: path, Model: "glm-5", ModelProvider: "zai"}
		var key string
		switch k := g.r.IntN(10); {
		case len(stores[agent]) == 0:
			key, e.ChatType = "agent:"+agent+":main", "direct"
		case k < 2 || len(stores[agent]) == 1: // the second session of an agent is a subagent
			key, e.SpawnedBy = "agent:"+agent+":subagent:"+g.uuid4(), "agent:"+agent+":main"
			g.st.Subagents++
		case k < 6:
			key, e.ChatType = "agent:"+agent+":discord:dm:"+strconv.Itoa(n), "direct"
		case k < 8:
			key, e.Label = "agent:"+agent+":cron:"+g.uuid4(), "Cron: "+g.title()
		default:
			key, e.ChatType = "agent:"+agent+":discord:channel:"+strconv.Itoa(n), "channel"
		}
		stores[agent][key] = e
		return nil
	})
	if err != nil {
		return err
	}
	for _, agent := range agents {
		if stores[agent] == nil {
			continue
		}
		b, err := json.MarshalIndent(stores[agent], "", "  ")
		if err != nil {
			return fmt.Errorf("openclaw store: %w", err)
		}
		if err := g.writeFile(filepath.Join(root, agent, "sessions", "sessions.json"), append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes a small file that is not a transcript.
func (g *generator) writeFile(path string, data []byte) error {
	if g.mem != nil {
		g.mem.Write(data)
		return nil
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	return nil
}

// nexusEntry is what the generator asks chatstore to record for one session.
type nexusEntry struct {
	key    string
	fields map[string]any
}

// runNexus: <root>/<id>.jsonl, root standing for $NEXUS_HOME/state/sessions, and the entries
// of sessions.json written by internal/chatstore itself.
func (g *generator) runNexus(ctx context.Context) error {
	root := filepath.Join(g.dir, "nexus", "state", "sessions")
	g.st.Roots = []string{root}
	var entries []nexusEntry
	var last string
	err := g.eachSession(ctx, func(bool) error {
		id, cwd := g.uuid7(), g.project()
		started := g.ms()
		if err := g.piSession(filepath.Join(root, id+".jsonl"), id, cwd, "bash"); err != nil {
			return err
		}
		f := map[string]any{"sessionId": id, "sessionStartedAt": started, "project": cwd, "model": "claude-sonnet-4-5"}
		var key string
		switch k := g.r.IntN(20); {
		case len(entries) == 0:
			key = "agent:main:main"
		case k < 3:
			key = "agent:main:telegram:dm:" + strconv.Itoa(len(entries))
		case k < 8 || len(entries) == 1: // the second session is a subagent
			key = "agent:main:subagent:" + id
			f["isSubagent"] = true
			f["parentSessionId"] = last
			f["toolCallId"] = g.toolUseID()
			g.st.Subagents++
		default:
			key = "agent:main:import:" + id
		}
		if g.r.IntN(10) < 3 {
			f["label"] = g.title() + " #" + strconv.Itoa(len(entries)) // labels are unique per store
		}
		entries = append(entries, nexusEntry{key: key, fields: f})
		last = id
		return nil
	})
	if err != nil || g.mem != nil {
		return err
	}
	return createEntries(ctx, root, entries)
}

// createEntries records the sessions in the store. The creates run concurrently so the store
// commits them in batches (one file replacement per batch, not per session); the file's bytes
// do not depend on the batching: entries are sorted and the store's clock is fixed. The last
// entry is created alone, after the others, so the backup the store keeps of the version before
// (sessions.json.bak) is the same every time too.
func createEntries(ctx context.Context, dir string, entries []nexusEntry) error {
	end := timeBase().AddDate(1, 0, 0)
	store, err := chatstore.Open(dir, chatstore.Options{Now: func() time.Time { return end }})
	if err != nil {
		return fmt.Errorf("nexus store: %w", err)
	}
	if len(entries) == 0 {
		return nil
	}
	sem := make(chan struct{}, 64)
	errs := make([]error, len(entries))
	var wg sync.WaitGroup
	for i, e := range entries[:len(entries)-1] {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, errs[i] = store.Create(ctx, e.key, e.fields)
		})
	}
	wg.Wait()
	last := entries[len(entries)-1]
	_, errs[len(entries)-1] = store.Create(ctx, last.key, last.fields)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nexus store: %w", err)
	}
	return nil
}

// ---- Claude Code ----

type ccDialect struct {
	g       *generator
	prefix  string // the members after parentUuid every line repeats
	model   string
	parent  string
	window  int64
	sidecar bool // a subagent's transcript
	// children are the subagents the session's Task calls started, written after it.
	children []ccChild
	cwd, id  string
}

type ccChild struct {
	agentID string
	start   time.Time
}

func newClaude(g *generator, cwd, sessionID, agentID string) *ccDialect {
	models := []string{"claude-opus-4-5-20251101", "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"}
	d := &ccDialect{g: g, model: models[g.r.IntN(len(models))], cwd: cwd, id: sessionID}
	side := "false"
	if agentID != "" {
		side, d.sidecar = "true", true
	}
	d.prefix = `,"isSidechain":` + side + `,"userType":"external","cwd":"` + cwd + `","sessionId":"` + sessionID +
		`","version":"2.0.56","gitBranch":"main",`
	if agentID != "" {
		d.prefix += `"agentId":"` + agentID + `",`
	}
	return d
}

func (d *ccDialect) head() {
	g := d.g
	g.w(`{"parentUuid":`)
	if d.parent == "" {
		g.w("null")
	} else {
		g.wq(d.parent)
	}
	g.w(d.prefix)
}

// tail ends a line with its uuid and timestamp.
func (d *ccDialect) tail() {
	g := d.g
	u := g.uuid4()
	g.w(`"uuid":"` + u + `","timestamp":`)
	g.wts()
	g.w("}\n")
	d.parent = u
}

func (d *ccDialect) user(text []byte) {
	g := d.g
	if !d.sidecar {
		u := g.uuid4()
		g.w(`{"type":"file-history-snapshot","messageId":"` + u + `","snapshot":{"messageId":"` + u +
			`","trackedFileBackups":{},"timestamp":`)
		g.wts()
		g.w(`},"isSnapshotUpdate":false}` + "\n")
	}
	d.head()
	g.w(`"type":"user","message":{"role":"user","content":`)
	g.wqb(text)
	g.w(`},`)
	d.tail()
}

// assistant writes one reply as Claude Code streams it: a line per content block, all with the
// reply's message.id and requestId, the usage snapshot of the last line being the final one.
func (d *ccDialect) assistant(text []byte, calls []toolCall) {
	g := d.g
	msgID := "msg_01" + string(g.chars(nil, alnum, 22))
	reqID := "req_011C" + string(g.chars(nil, alnum, 20))
	in, out, cr, cw := g.usage(text, len(calls), d.window)
	d.window += in + out
	g.st.Usage = g.st.Usage.Add(usageOf(in, out, cr, cw))
	thinking := g.r.IntN(10) < 4
	blocks := len(calls)
	if thinking {
		blocks++
	}
	if len(text) > 0 {
		blocks++
	}
	line := func(last bool) {
		g.w(`],"stop_reason":`)
		switch {
		case !last:
			g.w("null")
		case len(calls) > 0:
			g.w(`"tool_use"`)
		default:
			g.w(`"end_turn"`)
		}
		g.w(`,"stop_sequence":null,"usage":{"input_tokens":`)
		g.wi(in)
		g.w(`,"cache_creation_input_tokens":`)
		g.wi(cw)
		g.w(`,"cache_read_input_tokens":`)
		g.wi(cr)
		g.w(`,"output_tokens":`)
		if last {
			g.wi(out)
		} else {
			g.wi(1 + g.r.Int64N(8))
		}
		g.w(`,"service_tier":"standard"}},"requestId":"` + reqID + `","type":"assistant",`)
		d.tail()
	}
	open := func() {
		d.head()
		g.w(`"message":{"model":"` + d.model + `","id":"` + msgID + `","type":"message","role":"assistant","content":[`)
	}
	n := 0
	if thinking {
		open()
		g.thinking("signature")
		n++
		line(n == blocks)
	}
	if len(text) > 0 {
		open()
		g.w(`{"type":"text","text":`)
		g.wqb(text)
		g.w("}")
		n++
		line(n == blocks)
	}
	for i := range calls {
		c := &calls[i]
		open()
		g.w(`{"type":"tool_use","id":"` + c.id + `","name":"` + ccToolName(c.kind) + `","input":`)
		switch c.kind {
		case kindShell:
			g.args("command", c.cmd, "description", "Run "+c.cmd)
		case kindRead:
			g.args("file_path", c.path)
		case kindEdit:
			g.args("file_path", c.path, "old_string", c.old, "new_string", c.new)
		case kindGrep:
			g.args("pattern", c.cmd, "path", c.path, "output_mode", "content")
		case kindWrite:
			g.args("file_path", c.path, "content", c.new)
		case kindSpawn:
			g.args("description", c.cmd, "prompt", c.new, "subagent_type", "general-purpose")
		}
		g.w("}")
		n++
		line(n == blocks)
	}
	for i := range calls {
		g.tick(30 * time.Second)
		d.result(&calls[i])
	}
}

func ccToolName(k toolKind) string {
	return [...]string{kindShell: "Bash", kindRead: "Read", kindEdit: "Edit", kindGrep: "Grep", kindWrite: "Write", kindSpawn: "Task"}[k]
}

// result writes a tool result line with the toolUseResult Claude Code records beside it.
func (d *ccDialect) result(c *toolCall) {
	g := d.g
	d.head()
	g.w(`"type":"user","message":{"role":"user","content":[{"tool_use_id":"` + c.id + `","type":"tool_result","content":`)
	if c.kind == kindSpawn {
		g.w(`[{"type":"text","text":`)
		g.wqb(c.result)
		g.w(`}]`)
	} else {
		g.wqb(c.result)
	}
	g.w(`,"is_error":` + strconv.FormatBool(c.isErr) + `}]},"toolUseResult":`)
	switch {
	case c.isErr:
		g.wqb(c.result)
	case c.kind == kindShell:
		g.w(`{"stdout":`)
		g.wqb(c.result)
		g.w(`,"stderr":"","interrupted":false,"isImage":false}`)
	case c.kind == kindRead:
		g.w(`{"type":"text","file":{"filePath":"` + c.path + `","content":`)
		g.wqb(c.result)
		g.w(`,"numLines":120,"startLine":1,"totalLines":120}}`)
	case c.kind == kindSpawn:
		g.w(`{"status":"completed","prompt":"` + c.new + `","agentId":"` + c.child + `","content":[{"type":"text","text":`)
		g.wqb(c.result)
		g.w(`}],"totalDurationMs":`)
		g.wi(1000 + g.r.Int64N(600000))
		g.w(`,"totalTokens":`)
		g.wi(g.r.Int64N(200000))
		g.w(`,"totalToolUseCount":`)
		g.wi(g.r.Int64N(40))
		g.w("}")
	default:
		g.w(`{"filePath":"` + c.path + `","type":"update"}`)
	}
	g.w(",")
	d.tail()
}

func (d *ccDialect) step(text []byte, calls []toolCall) { d.assistant(text, calls) }
func (d *ccDialect) final(text []byte)                  { d.assistant(text, nil) }

// spawn turns c into a Task call whose subagent is written after the session.
func (d *ccDialect) spawn(c *toolCall) {
	g := d.g
	c.kind, c.isErr = kindSpawn, false
	c.child = string(g.chars(nil, hexDigits, 7))
	c.cmd = g.title()
	c.new = string(g.words(nil, 12, " "))
	d.children = append(d.children, ccChild{agentID: c.child, start: g.now})
}

// runClaude: <root>/<cwd with / as ->/<id>.jsonl, subagents in <id>/subagents/agent-<id>.jsonl,
// root standing for ~/.claude/projects.
func (g *generator) runClaude(ctx context.Context) error {
	root := filepath.Join(g.dir, "claude", "projects")
	g.st.Roots = []string{root}
	return g.eachSession(ctx, func(first bool) error {
		cwd, id := g.project(), g.uuid4()
		dir := filepath.Join(root, slug(cwd))
		if err := g.create(filepath.Join(dir, id+".jsonl")); err != nil {
			return err
		}
		d := newClaude(g, cwd, id, "")
		if g.r.IntN(10) < 3 {
			g.w(`{"type":"summary","summary":"` + g.title() + `","leafUuid":"` + g.uuid4() + `"}` + "\n")
		}
		var spawn func(*toolCall)
		if g.spawns(first) {
			spawn = d.spawn
		}
		g.conversation(d, g.messages(), cwd, g.toolUseID, spawn)
		if err := g.finish(); err != nil {
			return err
		}
		for _, ch := range d.children {
			g.now = ch.start
			if err := g.create(filepath.Join(dir, id, "subagents", "agent-"+ch.agentID+".jsonl")); err != nil {
				return err
			}
			cd := newClaude(g, cwd, id, ch.agentID)
			g.conversation(cd, g.childMessages(), cwd, g.toolUseID, nil)
			if err := g.finish(); err != nil {
				return err
			}
			g.st.Subagents++
		}
		return nil
	})
}

// slug is Claude Code's project directory name: every character but letters and digits as -.
func slug(cwd string) string {
	b := []byte(cwd)
	for i, c := range b {
		keep := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !keep {
			b[i] = '-'
		}
	}
	return string(b)
}

// ---- Codex ----

type cxDialect struct {
	g     *generator
	cwd   string
	model string
	// The running token count Codex reports, and the context window's tokens.
	in, cached, out, reasoning, window int64
	counted                            bool
	children                           []cxChild
}

type cxChild struct {
	id    string
	start time.Time
}

func (d *cxDialect) line(typ string) {
	d.g.w(`{"timestamp":`)
	d.g.wts()
	d.g.w(`,"type":"` + typ + `","payload":`)
}

func (d *cxDialect) meta(id, parent string) {
	g := d.g
	d.line("session_meta")
	g.w(`{"id":"` + id + `","timestamp":`)
	g.wts()
	g.w(`,"cwd":"` + d.cwd + `","originator":"codex_cli_rs","cli_version":"0.92.0",`)
	if parent != "" {
		g.w(`"parent_thread_id":"` + parent + `",`)
	}
	g.w(`"source":"cli","model_provider":"openai","git":{"commit_hash":"`)
	g.tmp = g.chars(g.tmp[:0], hexDigits, 40)
	g.wb(g.tmp)
	g.w(`","branch":"main"}}}` + "\n")
	// The environment Codex injects as the first user message: a message, not a turn.
	d.line("response_item")
	g.w(`{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>\n  <cwd>` +
		d.cwd + `</cwd>\n  <approval_policy>on-request</approval_policy>\n  <sandbox_mode>workspace-write</sandbox_mode>\n  <shell>bash</shell>\n</environment_context>"}]}}` + "\n")
	g.st.Messages++
}

func (d *cxDialect) user(text []byte) {
	g := d.g
	d.line("turn_context")
	g.w(`{"cwd":"` + d.cwd + `","approval_policy":"on-request","sandbox_policy":{"type":"workspace-write","network_access":false},"model":"` +
		d.model + `","effort":"medium","summary":"auto"}}` + "\n")
	d.message("user", "input_text", "user_message", `,"images":[]`, text)
}

// message writes a response_item message and the event_msg copy Codex keeps of it.
func (d *cxDialect) message(role, block, event, eventMore string, text []byte) {
	g := d.g
	d.line("response_item")
	g.w(`{"type":"message","role":"` + role + `","content":[{"type":"` + block + `","text":`)
	g.wqb(text)
	g.w("}]}}\n")
	d.line("event_msg")
	g.w(`{"type":"` + event + `","message":`)
	g.wqb(text)
	g.w(eventMore + "}}\n")
}

// reply writes the reasoning item (encrypted, as Codex stores it), the assistant message and
// its event copy, then the calls and their outputs, then the running token count.
func (d *cxDialect) reply(text []byte, calls []toolCall) {
	g := d.g
	if g.r.IntN(2) == 0 {
		d.line("response_item")
		g.w(`{"type":"reasoning","summary":[],"content":null,"encrypted_content":"gAAAAAB`)
		g.tmp = g.chars(g.tmp[:0], base64Abc, 100+g.r.IntN(500))
		g.wb(g.tmp)
		g.w(`"}}` + "\n")
	}
	if len(text) == 0 {
		// Codex comments before it calls tools: a step always has a message.
		g.scratch[2] = g.text(g.scratch[2][:0], g.size(80, 20, 400), true)
		text = g.scratch[2]
	}
	d.message("assistant", "output_text", "agent_message", "", text)
	for i := range calls {
		c := &calls[i]
		d.line("response_item")
		switch c.kind {
		case kindEdit, kindWrite:
			g.w(`{"type":"custom_tool_call","status":"completed","call_id":"` + c.id + `","name":"apply_patch","input":"*** Begin Patch\n`)
			if c.kind == kindEdit {
				g.w(`*** Update File: ` + c.path + `\n@@\n-` + c.old + `\n+` + c.new)
			} else {
				g.w(`*** Add File: ` + c.path + `\n+` + c.new)
			}
			g.w(`\n*** End Patch\n"}}` + "\n")
		case kindSpawn:
			g.w(`{"type":"function_call","name":"spawn_agent","arguments":`)
			g.argsString("message", c.new)
			g.w(`,"call_id":"` + c.id + `"}}` + "\n")
		default:
			cmd := c.cmd
			switch c.kind {
			case kindRead:
				cmd = "sed -n '1,200p' " + c.path
			case kindGrep:
				cmd = "rg -n " + c.cmd + " " + c.path
			}
			g.w(`{"type":"function_call","name":"shell_command","arguments":`)
			g.argsString("command", cmd, "workdir", d.cwd)
			g.w(`,"call_id":"` + c.id + `"}}` + "\n")
		}
	}
	for i := range calls {
		c := &calls[i]
		g.tick(30 * time.Second)
		d.line("response_item")
		switch c.kind {
		case kindEdit, kindWrite:
			g.w(`{"type":"custom_tool_call_output","call_id":"` + c.id + `","output":`)
			g.wqb(c.result)
		case kindSpawn:
			g.w(`{"type":"function_call_output","call_id":"` + c.id + `","output":"{\"agent_id\":\"` + c.child + `\",\"nickname\":\"` + c.cmd + `\"}"`)
		default:
			g.w(`{"type":"function_call_output","call_id":"` + c.id + `","output":"Exit code: `)
			if c.isErr {
				g.w("1")
			} else {
				g.w("0")
			}
			g.w(`\nWall time: 0.2 seconds\nOutput:\n`)
			g.wb(c.result)
			g.w(`"`)
		}
		g.w("}}\n")
	}
	in, out, cr, _ := g.usage(text, len(calls), d.window)
	d.window += in + out
	d.in += in + cr
	d.cached += cr
	d.out += out
	d.reasoning += g.r.Int64N(500)
	d.counted = true
	d.line("event_msg")
	g.w(`{"type":"token_count","info":{"total_token_usage":{"input_tokens":`)
	g.wi(d.in)
	g.w(`,"cached_input_tokens":`)
	g.wi(d.cached)
	g.w(`,"output_tokens":`)
	g.wi(d.out)
	g.w(`,"reasoning_output_tokens":`)
	g.wi(d.reasoning)
	g.w(`,"total_tokens":`)
	g.wi(d.in + d.out)
	g.w(`},"model_context_window":258400},"rate_limits":null}}` + "\n")
}

func (d *cxDialect) step(text []byte, calls []toolCall) { d.reply(text, calls) }
func (d *cxDialect) final(text []byte)                  { d.reply(text, nil) }

// close adds the session's final token count to the source's usage (the adapter takes the
// last count of each file).
func (d *cxDialect) close() {
	if d.counted {
		d.g.st.Usage = d.g.st.Usage.Add(usageOf(d.in-d.cached, d.out, d.cached, 0))
		d.g.st.Usage.Reasoning += d.reasoning
	}
}

// spawn turns c into a spawn_agent call whose child thread is written after the session.
func (d *cxDialect) spawn(c *toolCall) {
	g := d.g
	c.kind, c.isErr = kindSpawn, false
	c.child = g.uuid7()
	c.cmd = string(g.words(nil, 1, ""))
	c.new = string(g.words(nil, 12, " "))
	d.children = append(d.children, cxChild{id: c.child, start: g.now})
}

func (g *generator) callID() string { return "call_" + string(g.chars(nil, alnum, 24)) }

// runCodex: <root>/YYYY/MM/DD/rollout-<time>-<id>.jsonl, root standing for ~/.codex/sessions;
// spawned subagents are rollouts of their own whose session_meta names the parent thread.
func (g *generator) runCodex(ctx context.Context) error {
	root := filepath.Join(g.dir, "codex", "sessions")
	g.st.Roots = []string{root}
	models := []string{"gpt-5-codex", "gpt-5.2-codex", "gpt-5.1-codex-max"}
	return g.eachSession(ctx, func(first bool) error {
		d := &cxDialect{g: g, cwd: g.project(), model: models[g.r.IntN(len(models))]}
		id := g.uuid7()
		var spawn func(*toolCall)
		if g.spawns(first) {
			spawn = d.spawn
		}
		if err := g.codexFile(root, id, "", d, func() {
			g.conversation(d, g.messages()-1, d.cwd, g.callID, spawn)
		}); err != nil {
			return err
		}
		for _, ch := range d.children {
			g.now = ch.start
			cd := &cxDialect{g: g, cwd: d.cwd, model: d.model}
			if err := g.codexFile(root, ch.id, id, cd, func() {
				g.conversation(cd, g.childMessages()-1, cd.cwd, g.callID, nil)
			}); err != nil {
				return err
			}
			g.st.Subagents++
		}
		return nil
	})
}

func (g *generator) codexFile(root, id, parent string, d *cxDialect, body func()) error {
	name := "rollout-" + g.now.Format("2006-01-02T15-04-05") + "-" + id + ".jsonl"
	if err := g.create(filepath.Join(root, g.now.Format("2006/01/02"), name)); err != nil {
		return err
	}
	d.meta(id, parent)
	body()
	d.close()
	return g.finish()
}
