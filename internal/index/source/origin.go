package source

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/transcript"
)

// originKey is the user message entry field where nexus records the message's origin
// (internal/kinds/aichat's OriginField); pi's own entries have none.
var originKey = []byte(`"nexusOrigin"`)

// entryOrigin is the origin a nexus user message entry records, the zero origin when it has
// none (or one that does not decode): kind and channel lowercased, as the index matches them.
func entryOrigin(e *transcript.Entry) abi.Origin {
	if !bytes.Contains(e.Raw, originKey) {
		return abi.Origin{}
	}
	var v struct {
		Origin abi.Origin `json:"nexusOrigin"`
	}
	if json.Unmarshal(e.Raw, &v) != nil {
		return abi.Origin{}
	}
	o := v.Origin
	o.Kind, o.Channel = strings.ToLower(o.Kind), strings.ToLower(o.Channel)
	return o
}
