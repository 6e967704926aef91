//go:build !race

package output

const raceEnabled = false
