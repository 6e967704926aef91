package abi_test

import (
	"encoding/json"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
)

// AppendJSON must write what encoding/json writes: clients and the golden files see one form.
func TestLogLineAppendJSON(t *testing.T) {
	for _, l := range []abi.LogLine{
		{Type: abi.PayloadLogLine, Stream: abi.StreamStdout, Line: "plain line 42", Offset: 4096},
		{Type: abi.PayloadLogLine, Stream: abi.StreamGateway, Line: `quote " back \ tab	 nl`, Level: "INFO", Offset: 1},
		{Type: abi.PayloadLogLine, Stream: abi.StreamFile, Line: "<html> & \u2028 \x00 \x7f é \xff", Gen: 3, Offset: -1},
		{},
	} {
		want, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.AppendJSON([]byte("x")); string(got) != "x"+string(want) {
			t.Errorf("AppendJSON(%+v)\n got %s\nwant x%s", l, got, want)
		}
	}
}

func FuzzLogLineAppendJSON(f *testing.F) {
	f.Add("line", "stdout", "", int64(7), 0)
	f.Add("\xe2\x80\xa8<\"\\", "stderr", "WARN", int64(-3), 2)
	f.Fuzz(func(t *testing.T, line, stream, level string, offset int64, gen int) {
		l := abi.LogLine{Type: abi.PayloadLogLine, Stream: stream, Line: line, Level: level, Offset: offset, Gen: gen}
		want, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.AppendJSON(nil); string(got) != string(want) {
			t.Errorf("got %s want %s", got, want)
		}
	})
}
