package broker_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/broker/brokertest"
)

// TestContract: the SQLite store keeps the queues' contract; two instances are two stores on
// one database file (two processes).
func TestContract(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) func(t *testing.T) broker.Queues {
		path := filepath.Join(t.TempDir(), "broker", "queues.db")
		return func(t *testing.T) broker.Queues {
			s, err := broker.Open(context.Background(), path, broker.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	})
}
