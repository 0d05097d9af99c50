package switchyardv1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// TestGeneratedCodeIsCurrent regenerates the code from the .proto files and
// fails when the committed files differ: generated code is never edited by
// hand, and never left behind its source.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("regenerating needs protoc and the pinned plugins")
	}
	for _, tool := range []string{"protoc", "npm", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Unavailable(t, "%s is not installed (apt-get install protobuf-compiler npm)", tool)
		}
	}
	out := t.TempDir()
	cmd := exec.Command("../../../scripts/gen-proto.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/gen-proto.sh: %v\n%s", err, b)
	}
	gen, err := filepath.Glob(filepath.Join(out, "*"))
	if err != nil || len(gen) == 0 {
		t.Fatalf("nothing generated (%v)", err)
	}
	for _, g := range gen {
		name := filepath.Base(g)
		want, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("%s is generated but not committed: run scripts/gen-proto.sh", name)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run scripts/gen-proto.sh and commit the result", name)
		}
	}
}
