// Package migrations holds Switchyard's schema as numbered SQL files
// (0001_init.sql, 0002_…) embedded in the binary, and the runner that applies
// them at start-up under a Postgres advisory lock.
//
// Migrations are expand-only and have no down steps: a file only adds
// tables, nullable columns, columns with defaults and indexes, so that a
// replica of the previous release keeps working on the migrated schema while
// a rolling upgrade is under way. A test scans the files for statements that
// would break that promise.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed *.sql
var files embed.FS

// FS returns the embedded migration files.
func FS() fs.FS { return files }
