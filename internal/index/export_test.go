package index

import "database/sql"

// The writer's batch bounds, for tests that cross them.
const (
	BatchFiles = batchFiles
	BatchBytes = batchBytes
)

// SetTestHook has hook called as each file is parsed ("parse") and written ("write").
func SetTestHook(ix *Index, hook func(stage, path string)) { ix.testHook = hook }

// SetPieceBytes makes ix read files n bytes at a time.
func SetPieceBytes(ix *Index, n int64) { ix.pieceBytes = n }

// LinkByCall are the statements that link subagents by their spawning call.
var LinkByCall = linkByCall //nolint:gochecknoglobals // the package's own, for its tests

// DB is the index's database.
func DB(ix *Index) *sql.DB { return ix.db }
