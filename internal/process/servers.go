package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
)

// GatewayServer is the built-in server: the gateway itself.
const GatewayServer = "gateway"

// Server is a listening address a developer watches (the wire type of /v1/servers).
type Server = abi.ProcessServer

func (m *Manager) serversPath() string { return filepath.Join(m.dir, "servers.json") }

// SetGatewayAddr is what the built-in gateway server lists as its address.
func (m *Manager) SetGatewayAddr(addr string) {
	m.mu.Lock()
	m.gatewayAddr = addr
	m.mu.Unlock()
}

func (m *Manager) loadServersLocked() (map[string]Server, error) {
	out := map[string]Server{}
	data, err := fsutil.ReadFileNoFollow(m.serversPath())
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("servers: %w", err)
	}
	var list []Server
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("servers: %s: %w", m.serversPath(), err)
	}
	for _, s := range list {
		out[s.Name] = s
	}
	return out, nil
}

func (m *Manager) saveServersLocked(all map[string]Server) error {
	list := make([]Server, 0, len(all))
	for _, s := range all {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return fmt.Errorf("servers: %w", err)
	}
	if err := fsutil.WriteFileAtomic(m.serversPath(), b); err != nil {
		return fmt.Errorf("servers: %w", err)
	}
	return nil
}

// AddServer records a server: a name, and a managed process or an address (or both).
func (m *Manager) AddServer(s Server) (Server, error) {
	switch {
	case !namePattern.MatchString(s.Name):
		return Server{}, abi.Errorf(abi.CodeInvalidArgument, "", "server name %q: use 1 to 64 of letters, digits, '.', '_' and '-'", s.Name)
	case s.Name == GatewayServer:
		return Server{}, abi.Errorf(abi.CodeInvalidArgument, "", "%q is the gateway's own server", s.Name)
	case s.ProcessID == "" && s.Addr == "":
		return Server{}, abi.Errorf(abi.CodeInvalidArgument, "", "a server needs --process ID or --addr HOST:PORT")
	}
	if s.Addr != "" {
		if _, _, err := net.SplitHostPort(s.Addr); err != nil {
			return Server{}, abi.Errorf(abi.CodeInvalidArgument, "", "server address %q: want HOST:PORT", s.Addr)
		}
	}
	if s.ProcessID != "" {
		p, err := m.get(s.ProcessID)
		if err != nil {
			return Server{}, err
		}
		s.ProcessID = p.info.ID
	}
	s.BuiltIn = false
	m.mu.Lock()
	defer m.mu.Unlock()
	all, err := m.loadServersLocked()
	if err != nil {
		return Server{}, err
	}
	if _, ok := all[s.Name]; ok {
		return Server{}, abi.Errorf(abi.CodeInvalidArgument, "", "a server %q exists: remove it first", s.Name)
	}
	all[s.Name] = s
	return s, m.saveServersLocked(all)
}

// Servers lists the servers, the gateway first.
func (m *Manager) Servers() ([]Server, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	all, err := m.loadServersLocked()
	if err != nil {
		return nil, err
	}
	out := []Server{{Name: GatewayServer, Addr: m.gatewayAddr, BuiltIn: true}}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out = append(out, all[n])
	}
	return out, nil
}

// Server returns one server by name.
func (m *Manager) Server(name string) (Server, error) {
	all, err := m.Servers()
	if err != nil {
		return Server{}, err
	}
	for _, s := range all {
		if s.Name == name {
			return s, nil
		}
	}
	return Server{}, abi.Errorf(abi.CodeInvalidArgument, "", "no server %q (nexus server list)", name)
}

// RemoveServer forgets a server (its process, if any, runs on).
func (m *Manager) RemoveServer(name string) error {
	if name == GatewayServer {
		return abi.Errorf(abi.CodeInvalidArgument, "", "the gateway's own server cannot be removed")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	all, err := m.loadServersLocked()
	if err != nil {
		return err
	}
	if _, ok := all[name]; !ok {
		return abi.Errorf(abi.CodeInvalidArgument, "", "no server %q (nexus server list)", name)
	}
	delete(all, name)
	return m.saveServersLocked(all)
}
