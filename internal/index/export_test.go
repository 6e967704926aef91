package index

// The writer's batch bounds, for tests that cross them.
const (
	BatchFiles = batchFiles
	BatchBytes = batchBytes
)
