// Package archtest holds no code: its tests check docs/ARCHITECTURE.md against the code, so the
// two cannot drift apart: the imports of the module's packages follow the order of its package
// list ("Packages"), and its "Dependencies" section names every direct dependency of go.mod.
package archtest
