//go:build race

package mcp_test

const raceEnabled = true
