package index

// The writer's batch bounds, for tests that cross them.
const (
	BatchFiles = batchFiles
	BatchBytes = batchBytes
)

// SetTestHook has hook called as each file is parsed ("parse") and written ("write").
func SetTestHook(ix *Index, hook func(stage, path string)) { ix.testHook = hook }

// SetPieceBytes makes ix read files n bytes at a time.
func SetPieceBytes(ix *Index, n int64) { ix.pieceBytes = n }
