package conversation_test

import (
	"testing"

	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/conversation/conversationtest"
)

// TestServiceContract runs the contract suite on the files directly (the local transport).
func TestServiceContract(t *testing.T) {
	conversationtest.Run(t, func(_ *testing.T, opts conversation.Options) conversation.API {
		return conversation.New(opts)
	})
}
