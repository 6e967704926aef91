package source

import "strings"

// Resume is the command line that continues a session of the adapters below in its own tool,
// "" where the tool has none. Each of these tools keeps its sessions per project and resumes
// in the directory it is started in, so the command starts in the session's project.
func Resume(src, sid, project string) string {
	var cmd string
	switch src {
	case "opencode":
		cmd = "opencode --session " + shellQuote(sid)
	case "qwen-code":
		cmd = "qwen --resume " + shellQuote(sid)
	case "gemini":
		cmd = "gemini --resume " + shellQuote(sid)
	case "crush":
		cmd = "crush --session " + shellQuote(sid)
	default:
		return ""
	}
	if project != "" {
		cmd = "cd " + shellQuote(project) + " && " + cmd
	}
	return cmd
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("-_./:@+=,", r)
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
