package index

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/nexus-run/nexus/internal/index/source"
)

// originsSchema: where each user message that says so came from (nexus's nexusOrigin), by the
// tools' own ids rather than row ids, so a rebuild of the other tables leaves it valid, and it
// is created apart from the versioned schema. kind and channel are lowercase.
const originsSchema = `
CREATE TABLE IF NOT EXISTS message_origins (
	source  TEXT NOT NULL,
	sid     TEXT NOT NULL,
	mid     TEXT NOT NULL,
	kind    TEXT NOT NULL,
	oid     TEXT NOT NULL DEFAULT '',
	channel TEXT NOT NULL DEFAULT '',
	peer    TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (source, sid, mid)
) WITHOUT ROWID;
`

// originStatement records a message's origin (statements["origin"]).
const originStatement = `INSERT INTO message_origins (source, sid, mid, kind, oid, channel, peer) VALUES (?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (source, sid, mid) DO UPDATE SET kind = excluded.kind, oid = excluded.oid, channel = excluded.channel, peer = excluded.peer`

// ensureOrigins creates the origins table of an index that lacks it.
func ensureOrigins(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, originsSchema); err != nil {
		return fmt.Errorf("index: origins: %w", err)
	}
	return nil
}

// writeOrigins records the origins of a parse's user messages.
func (w *writer) writeOrigins(ctx context.Context, src, sid string, msgs []source.Message) error {
	for i := range msgs {
		o := msgs[i].Origin
		if o.Kind == "" {
			continue
		}
		if err := w.exec(ctx, "origin", src, sid, msgs[i].ID, o.Kind, o.ID, o.Channel, o.Peer); err != nil {
			return err
		}
	}
	return nil
}

// originFilter appends the condition of --origin on a hit r (alias of messages or tool_calls)
// of session s: the prompt of r's turn came from the origin named, by its kind (webhook),
// kind:id (webhook:ci) or channel (telegram). turn is the SQL of r's turn number.
func originFilter(origin, turn string, where []string, args []any) ([]string, []any) {
	if origin == "" {
		return where, args
	}
	o := strings.ToLower(origin)
	where = append(where, `EXISTS (SELECT 1 FROM messages p JOIN message_origins o ON o.source = s.source AND o.sid = s.sid AND o.mid = p.mid
		WHERE p.session = r.session AND p.turn = `+turn+` AND p.role = 'user' AND (o.kind = ? OR o.kind || ':' || lower(o.oid) = ? OR o.channel = ?))`)
	return where, append(args, o, o, o)
}
