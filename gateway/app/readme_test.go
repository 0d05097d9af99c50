package app

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// readmeCommands returns the shell commands of the README's code blocks that
// start with one of the prefixes, continuation lines joined.
func readmeCommands(t *testing.T, prefixes ...string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	var cur strings.Builder
	inBlock := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			continue
		}
		if cur.Len() == 0 {
			match := false
			for _, p := range prefixes {
				match = match || strings.HasPrefix(line, p)
			}
			if !match {
				continue
			}
		}
		// Drop trailing comments ("# the key is shown once").
		if i := strings.Index(line, "  #"); i >= 0 && !strings.Contains(line[i:], "'") {
			line = line[:i]
		}
		cont := strings.HasSuffix(strings.TrimRight(line, " "), "\\")
		if cont {
			cur.WriteString(strings.TrimSuffix(strings.TrimRight(line, " "), "\\"))
			cur.WriteString(" ")
		} else {
			cur.WriteString(line)
			cur.WriteString("\n")
		}
		// A quote still open continues the command on the next line, as
		// the shell reads it.
		if !cont && strings.Count(cur.String(), "'")%2 == 0 {
			cmds = append(cmds, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	return cmds
}

// TestReadmeExamplesWorkAgainstDev runs the README's grpcurl and curl
// examples, as printed, against `switchyard dev`.
func TestReadmeExamplesWorkAgainstDev(t *testing.T) {
	cmds := readmeCommands(t, "grpcurl ", "curl ")
	if len(cmds) < 3 {
		t.Fatalf("found only %d examples in the README", len(cmds))
	}
	for _, tool := range []string{"grpcurl", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Unavailable(t, "%s is not installed (go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4)", tool)
		}
	}
	d := startDev(t, nil)
	for _, c := range cmds {
		if !strings.Contains(c, "127.0.0.1:") {
			continue // not addressed to the demo (the install one-liner, say)
		}
		c = strings.ReplaceAll(c, "127.0.0.1:9090", d.grpc)
		c = strings.ReplaceAll(c, "127.0.0.1:8080", d.http)
		cmd := exec.Command("sh", "-c", "set -e; "+c)
		cmd.Env = append(os.Environ(), "ADMIN="+d.adminKey)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s\n→ %v\n%s", c, err, out)
			continue
		}
		if trimmed := strings.TrimSpace(string(out)); strings.HasPrefix(trimmed, `{"code"`) || strings.HasPrefix(trimmed, "ERROR") {
			t.Errorf("%s\n→ an error answer:\n%s", c, out)
		}
	}
}
