package releasetest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/switchyard-ai/switchyard"

// standInGo records each "go build" (its environment and arguments) and
// writes, in place of a binary, a script that prints a version line as the
// real binaries do, with the version -ldflags stamped. STANDIN_SAY, when
// set, replaces that version, to play a build that was not stamped.
const standInGo = `#!/bin/sh
if [ "$1" = env ]; then
	case $2 in GOHOSTOS) echo linux ;; GOHOSTARCH) echo amd64 ;; esac
	exit 0
fi
[ "$1" = build ] || exit 3
shift
out='' ldflags='' pkg=''
while [ $# -gt 0 ]; do
	case $1 in
	-o) out=$2; shift ;;
	-ldflags) ldflags=$2; shift ;;
	-*) ;;
	*) pkg=$1 ;;
	esac
	shift
done
echo "CGO_ENABLED=$CGO_ENABLED GOOS=$GOOS GOARCH=$GOARCH pkg=$pkg out=$(basename "$out") ldflags=$ldflags" >>"$STANDIN_LOG"
version=${ldflags##*.version=}
version=${STANDIN_SAY:-$version}
printf '#!/bin/sh\necho "%s %s go1.26.8 %s/%s"\n' "$(basename "$pkg")" "$version" "$GOOS" "$GOARCH" >"$out"
chmod +x "$out"
`

func runRelease(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(standInGo), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../../scripts/release.sh")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "builds")
	cmd := exec.Command("sh", append([]string{script}, args...)...)
	cmd.Env = append([]string{"PATH=" + bin + ":" + os.Getenv("PATH"), "STANDIN_LOG=" + log, "HOME=" + dir}, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	builds, _ := os.ReadFile(log)
	return string(out), string(builds), code
}

func TestReleaseBuildsEveryPlatform(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dist")
	output, builds, code := runRelease(t, nil, "--version", "v1.2.3", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, output)
	}
	got := strings.Split(strings.TrimSpace(builds), "\n")
	want := []string{
		"CGO_ENABLED=0 GOOS=linux GOARCH=amd64 pkg=./cmd/switchyard out=switchyard-linux-amd64 ldflags=-s -w -X " + module + "/gateway/app.version=v1.2.3",
		"CGO_ENABLED=1 GOOS=linux GOARCH=amd64 pkg=./cmd/switchyard-agent out=switchyard-agent-linux-amd64 ldflags=-s -w -X " + module + "/agent/app.version=v1.2.3",
		"CGO_ENABLED=0 GOOS=linux GOARCH=arm64 pkg=./cmd/switchyard out=switchyard-linux-arm64 ldflags=-s -w -X " + module + "/gateway/app.version=v1.2.3",
		"CGO_ENABLED=0 GOOS=linux GOARCH=arm64 pkg=./cmd/switchyard-agent out=switchyard-agent-linux-arm64 ldflags=-s -w -X " + module + "/agent/app.version=v1.2.3",
		"CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 pkg=./cmd/switchyard out=switchyard-darwin-arm64 ldflags=-s -w -X " + module + "/gateway/app.version=v1.2.3",
		"CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 pkg=./cmd/switchyard-agent out=switchyard-agent-darwin-arm64 ldflags=-s -w -X " + module + "/agent/app.version=v1.2.3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("builds:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// checksums.txt in sha256sum's format, one line per binary, true sums:
	// what install-node.sh looks its asset up in.
	f, err := os.Open(filepath.Join(out, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Errorf("checksums.txt line %q", sc.Text())
			continue
		}
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Errorf("checksums.txt lists %s: %v", name, err)
			continue
		}
		h := sha256.Sum256(data)
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("the checksum of %s is wrong", name)
		}
		names = append(names, name)
	}
	wantNames := []string{"switchyard-agent-darwin-arm64", "switchyard-agent-linux-amd64", "switchyard-agent-linux-arm64",
		"switchyard-darwin-arm64", "switchyard-linux-amd64", "switchyard-linux-arm64"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("checksums.txt lists %v, want %v", names, wantNames)
	}
	if !strings.Contains(output, "release v1.2.3 in "+out) {
		t.Errorf("output:\n%s", output)
	}
}

func TestReleaseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"a version with a space", nil, []string{"--version", "v1 beta"}, 2, "the version may hold letters, digits"},
		{"an unknown argument", nil, []string{"--outdir", "x"}, 2, "unknown argument --outdir"},
		{"a binary that does not say its version", []string{"STANDIN_SAY=dev"}, []string{"--version", "v1.2.3"}, 1, "not version v1.2.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args, "--out", filepath.Join(t.TempDir(), "dist"))
			out, _, code := runRelease(t, tc.env, args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want %d and %q:\n%s", code, tc.code, tc.want, out)
			}
		})
	}
}
