package installtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The scripts and the stand-ins are POSIX sh that shellcheck passes. With
// CI=true a missing shellcheck fails the test instead of skipping it.
func TestShellcheck(t *testing.T) {
	if _, err := exec.LookPath("shellcheck"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("shellcheck is not installed")
		}
		t.Skip("shellcheck is not installed")
	}
	standins, err := filepath.Glob("testdata/standins/*")
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{"../../scripts/install-node.sh", "../../scripts/release.sh"}, standins...)
	out, err := exec.Command("shellcheck", append([]string{"--shell=sh", "--severity=style"}, files...)...).CombinedOutput()
	if err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
}
