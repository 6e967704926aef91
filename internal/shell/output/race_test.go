//go:build race

package output

const raceEnabled = true
