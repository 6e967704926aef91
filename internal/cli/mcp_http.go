package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/gateway"
)

// mcpHTTPSetup is what an MCP client needs to reach a running gateway's /v1/mcp: the endpoint
// and where the bearer token is.
type mcpHTTPSetup struct {
	url       string
	tokenFile string
}

// gatewayMCPURL is the /v1/mcp endpoint of base (an http URL, its path defaulting to /v1/mcp),
// or, with base empty, of the gateway running for the state directory with --listen.
func (a *app) gatewayMCPURL(base string) (string, error) {
	if base == "" {
		data, err := fsutil.ReadFileNoFollow(filepath.Join(a.stateDir, gateway.InfoFile))
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("no gateway is running for %s: start one with nexus serve --listen 127.0.0.1:PORT, or pass --url http://HOST:PORT", a.stateDir)
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", gateway.InfoFile, err)
		}
		var in gateway.Info
		if err := json.Unmarshal(data, &in); err != nil {
			return "", fmt.Errorf("read %s: %w", gateway.InfoFile, err)
		}
		if in.Listen == "" {
			return "", fmt.Errorf("the gateway (pid %d) listens on its unix socket only, which MCP clients cannot reach: restart it with nexus serve --listen 127.0.0.1:PORT, or pass --url", in.PID)
		}
		host, port, err := net.SplitHostPort(in.Listen)
		if err != nil {
			return "", fmt.Errorf("the gateway's listen address %q: %w", in.Listen, err)
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1" // it listens on every address; this machine reaches it on loopback
		}
		base = "http://" + net.JoinHostPort(host, port)
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "--url %q: want http://HOST:PORT (the gateway's --listen address)", base)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = abi.APIPrefix + "/mcp"
	}
	return u.String(), nil
}

// writeMCPHTTPSetup prints the configuration of client for s: the configuration to stdout, how
// to give it the token to note. The token itself is never printed: Claude Code's command line
// reads it from the token file when it runs, Cursor and Codex from NEXUS_TOKEN.
func writeMCPHTTPSetup(out, note io.Writer, client string, s mcpHTTPSetup) error {
	exportLine := "export NEXUS_TOKEN=\"$(cat " + shellQuote(s.tokenFile) + ")\""
	var err error
	switch client {
	case "claude":
		fmt.Fprintln(note, "# Claude Code: run this (add --scope user to use nexus in every project); the shell reads the token from "+s.tokenFile+" as it runs:")
		_, err = fmt.Fprintln(out, "claude mcp add --transport http nexus "+shellQuote(s.url)+
			` --header "Authorization: Bearer $(cat `+shellQuote(s.tokenFile)+`)"`)
	case "cursor":
		fmt.Fprintln(note, `# Cursor: put this in ~/.cursor/mcp.json (merge it into "mcpServers" if the file exists), and start Cursor where NEXUS_TOKEN is set:`)
		fmt.Fprintln(note, "#   "+exportLine)
		doc := map[string]map[string]any{"mcpServers": {"nexus": map[string]any{
			"url": s.url, "headers": map[string]string{"Authorization": "Bearer ${env:NEXUS_TOKEN}"}}}}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		_ = enc.Encode(doc)
		_, err = out.Write(b.Bytes())
	case "codex":
		fmt.Fprintln(note, "# Codex: add this to ~/.codex/config.toml, and start Codex where NEXUS_TOKEN is set:")
		fmt.Fprintln(note, "#   "+exportLine)
		fmt.Fprintln(note, codexApprovalNote)
		_, err = io.WriteString(out, "[mcp_servers.nexus]\nurl = "+tomlString(s.url)+"\nbearer_token_env_var = \"NEXUS_TOKEN\"\n")
	default:
		err = fmt.Errorf("unknown client %q", client)
	}
	if err == nil && strings.HasPrefix(s.url, "http://") {
		u, _ := url.Parse(s.url)
		if ip := net.ParseIP(u.Hostname()); (ip == nil || !ip.IsLoopback()) && u.Hostname() != "localhost" {
			fmt.Fprintln(note, "# note: plain http to another host sends the token unencrypted; reach the gateway through an SSH tunnel or a TLS proxy")
		}
	}
	return err
}
