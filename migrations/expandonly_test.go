package migrations

import (
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// The expand-only rule: while a rolling upgrade runs, replicas of the
// previous release use the migrated schema, so a migration may add but never
// take away or tighten what they rely on.

var (
	blockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	lineComment  = regexp.MustCompile(`--[^\n]*`)
	quoted       = regexp.MustCompile(`'(?:[^']|'')*'`)
	spaces       = regexp.MustCompile(`\s+`)

	createTable = regexp.MustCompile(`^CREATE (?:UNLOGGED )?TABLE (?:IF NOT EXISTS )?("?[\w.]+"?)`)
	alterTable  = regexp.MustCompile(`^ALTER TABLE (?:IF EXISTS )?(?:ONLY )?("?[\w.]+"?)`)
	addColumn   = regexp.MustCompile(`\bADD (?:COLUMN )?(?:IF NOT EXISTS )?("?\w+"?) ([^,]*)`)
	setNotNull  = regexp.MustCompile(`\bALTER (?:COLUMN )?("?\w+"?) SET NOT NULL\b`)

	forbidden = []struct {
		re  *regexp.Regexp
		why string
	}{
		{regexp.MustCompile(`\bDROP\b`), "DROP removes what the previous release still uses"},
		{regexp.MustCompile(`\bRENAME\b`), "RENAME breaks the previous release's queries"},
		{regexp.MustCompile(`\bALTER (?:COLUMN )?"?\w+"? (?:SET DATA )?TYPE\b`), "changing a column's type breaks the previous release"},
		{regexp.MustCompile(`\bTRUNCATE\b`), "TRUNCATE destroys data"},
		{regexp.MustCompile(`\bDELETE FROM\b`), "DELETE destroys data"},
	}
)

// statements returns the SQL upper-cased, without comments or string
// literals, with runs of white space made one space, split at semicolons.
func statements(sql string) []string {
	sql = blockComment.ReplaceAllString(sql, " ")
	sql = lineComment.ReplaceAllString(sql, " ")
	sql = quoted.ReplaceAllString(sql, "''")
	sql = strings.ToUpper(sql)
	var out []string
	for _, s := range strings.Split(sql, ";") {
		s = strings.TrimSpace(spaces.ReplaceAllString(s, " "))
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// checkExpandOnly returns every statement of one migration file that breaks
// the expand-only rule. Tightening a column is allowed only on a table or
// column the same file creates, where no older release can depend on it.
func checkExpandOnly(name, sql string) []error {
	var problems []error
	created := map[string]bool{}      // tables created in this file
	addedColumns := map[string]bool{} // table.column added in this file
	for _, st := range statements(sql) {
		for _, f := range forbidden {
			if f.re.MatchString(st) {
				problems = append(problems, fmt.Errorf("%s: %q: %s", name, st, f.why))
			}
		}
		if m := createTable.FindStringSubmatch(st); m != nil {
			created[strings.Trim(m[1], `"`)] = true
			continue
		}
		m := alterTable.FindStringSubmatch(st)
		if m == nil {
			continue
		}
		table := strings.Trim(m[1], `"`)
		for _, add := range addColumn.FindAllStringSubmatch(st, -1) {
			col, def := strings.Trim(add[1], `"`), add[2]
			if col == "CONSTRAINT" {
				continue
			}
			addedColumns[table+"."+col] = true
			if !created[table] && strings.Contains(def, "NOT NULL") && !strings.Contains(def, "DEFAULT") {
				problems = append(problems, fmt.Errorf("%s: %q: a NOT NULL column without a DEFAULT breaks the previous release's inserts", name, st))
			}
		}
		for _, nn := range setNotNull.FindAllStringSubmatch(st, -1) {
			col := strings.Trim(nn[1], `"`)
			if !created[table] && !addedColumns[table+"."+col] {
				problems = append(problems, fmt.Errorf("%s: %q: SET NOT NULL on an existing column breaks the previous release's inserts", name, st))
			}
		}
	}
	return problems
}

func TestEmbeddedMigrationsAreExpandOnly(t *testing.T) {
	steps, err := readSteps(FS())
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) == 0 {
		t.Fatal("no embedded migrations")
	}
	for _, s := range steps {
		for _, p := range checkExpandOnly(s.version, s.sql) {
			t.Error(p)
		}
	}
	// Every embedded file is a step: nothing with a .sql-like name is
	// silently ignored.
	names, err := fs.Glob(FS(), "*")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(steps) {
		t.Errorf("embedded files %v, but %d steps", names, len(steps))
	}
}

func TestCheckExpandOnly(t *testing.T) {
	tests := []struct {
		name string
		sql  string
		bad  bool
	}{
		{"create table", `CREATE TABLE t (id int NOT NULL, v text);`, false},
		{"add nullable column", `ALTER TABLE t ADD COLUMN note text;`, false},
		{"add column with default", `ALTER TABLE t ADD COLUMN n int NOT NULL DEFAULT 0;`, false},
		{"create index", `CREATE INDEX t_v_idx ON t (v);`, false},
		{"insert", `INSERT INTO config_version (version) VALUES (0);`, false},
		{"on delete cascade is not a delete", `CREATE TABLE u (t_id int REFERENCES t (id) ON DELETE CASCADE);`, false},
		{"words in comments and strings", "-- we never DROP TABLE here\nCOMMENT ON TABLE t IS 'do not DELETE FROM t';", false},
		{"set not null in the creating file", `CREATE TABLE n (id int); ALTER TABLE n ALTER COLUMN id SET NOT NULL;`, false},
		{"set not null on a column added here", `ALTER TABLE t ADD COLUMN c int; ALTER TABLE t ALTER COLUMN c SET NOT NULL;`, false},

		{"drop table", `DROP TABLE tenants;`, true},
		{"drop table lower case", "drop\n  table if exists tenants;", true},
		{"drop column", `ALTER TABLE tenants DROP COLUMN name;`, true},
		{"drop index", `DROP INDEX usage_events_time_idx;`, true},
		{"drop default", `ALTER TABLE t ALTER COLUMN v DROP DEFAULT;`, true},
		{"rename column", `ALTER TABLE tenants RENAME COLUMN name TO title;`, true},
		{"rename table", `ALTER TABLE tenants RENAME TO customers;`, true},
		{"alter type", `ALTER TABLE models ALTER COLUMN context_window TYPE bigint;`, true},
		{"set data type", `ALTER TABLE models ALTER context_window SET DATA TYPE bigint;`, true},
		{"set not null on an existing column", `ALTER TABLE tenants ALTER COLUMN name SET NOT NULL;`, true},
		{"add not null column without default", `ALTER TABLE tenants ADD COLUMN region text NOT NULL;`, true},
		{"truncate", `TRUNCATE usage_events;`, true},
		{"delete", `DELETE FROM audit_log WHERE time < now();`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems := checkExpandOnly("test.sql", tt.sql)
			if got := len(problems) > 0; got != tt.bad {
				t.Errorf("checkExpandOnly(%q) = %v, want rejected=%v", tt.sql, problems, tt.bad)
			}
		})
	}
}
