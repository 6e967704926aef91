package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// The benchmark runs itself as the process whose output is followed: with writerEnv set it is
// the writer instead of the benchmark.
const (
	// writerEnv is how many lines to write; with gateEnv set, the writer first waits for a
	// byte on that fifo, so the followers are all in place before the first line.
	writerEnv = "NEXUS_BENCH_OBSERVERS_WRITER"
	gateEnv   = "NEXUS_BENCH_OBSERVERS_GATE"
	// idleEnv makes it write that many lines and then do nothing until it is stopped.
	idleEnv = "NEXUS_BENCH_OBSERVERS_IDLE"
)

// lineLen is the length of a line, newline included: 8 digits (the line's number from 0), a
// space and filler.
const lineLen = 100

// helper runs the writer or idle mode when the environment asks for one; false otherwise.
func helper() (bool, error) {
	if v, ok := os.LookupEnv(writerEnv); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return true, fmt.Errorf("%s: %w", writerEnv, err)
		}
		if gate := os.Getenv(gateEnv); gate != "" {
			if err := waitGate(gate); err != nil {
				return true, err
			}
		}
		return true, writeLines(os.Stdout, n)
	}
	if v, ok := os.LookupEnv(idleEnv); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return true, fmt.Errorf("%s: %w", idleEnv, err)
		}
		if err := writeLines(os.Stdout, n); err != nil {
			return true, err
		}
		for {
			time.Sleep(time.Hour) // until the gateway stops it
		}
	}
	return false, nil
}

// waitGate blocks until a byte can be read from the fifo at path.
func waitGate(path string) error {
	f, err := os.Open(path) //nolint:gosec // G304: the benchmark's own fifo
	if err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	defer func() { _ = f.Close() }()
	var b [1]byte
	if _, err := io.ReadFull(f, b[:]); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("gate: %w", err)
	}
	return nil
}

// writeLines writes lines 0 to n-1 (see lineLen) as fast as w takes them, 64 KiB at a time.
func writeLines(w io.Writer, n int) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	line := fillLine(make([]byte, lineLen))
	for i := range n {
		putNumber(line, i)
		if _, err := bw.Write(line); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

func fillLine(line []byte) []byte {
	for i := range line {
		line[i] = 'a' + byte(i%26)
	}
	line[8] = ' '
	line[len(line)-1] = '\n'
	return line
}

// putNumber writes i as 8 decimal digits at the start of line.
func putNumber(line []byte, i int) {
	for d := 7; d >= 0; d-- {
		line[d] = '0' + byte(i%10)
		i /= 10
	}
}

// lineNumber is the number putNumber wrote at the start of s; -1 when there is none.
func lineNumber(s string) int {
	if len(s) < 8 {
		return -1
	}
	n := 0
	for i := range 8 {
		c := s[i]
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}
