package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/switchyard-ai/switchyard"

// packages returns each package of the module with its direct imports
// (field "Imports") or its whole dependency closure ("Deps", as go list
// -deps sees it), test files excluded.
func packages(t *testing.T, field string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}}{{range .`+field+`}} {{.}}{{end}}`, mod+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			pkgs[f[0]] = f[1:]
		}
	}
	return pkgs
}

func ours(p string) bool { return p == mod || strings.HasPrefix(p, mod+"/") }

func under(p, dir string) bool { return p == mod+"/"+dir || strings.HasPrefix(p, mod+"/"+dir+"/") }

func TestDependencyRules(t *testing.T) {
	imports, closure := packages(t, "Imports"), packages(t, "Deps")
	if len(imports) == 0 {
		t.Fatal("no packages listed")
	}
	for pkg, direct := range imports {
		deps := closure[pkg]
		for _, d := range direct {
			switch {
			// 1. cmd/X imports only its app package (cmd/simengine its engine).
			case under(pkg, "cmd") && ours(d) && !allowedForCmd(pkg, d):
				t.Errorf("%s imports %s: a main imports only its app package", pkg, d)
			// 2. Only cmd/ imports gateway/app or agent/app.
			case !under(pkg, "cmd") && (under(d, "gateway/app") || under(d, "agent/app")) && !under(pkg, "gateway/app") && !under(pkg, "agent/app"):
				t.Errorf("%s imports %s: only cmd/ may import an app package", pkg, d)
			}
		}
		// 3. gateway and agent never import each other, even indirectly.
		for _, d := range deps {
			if under(pkg, "gateway") && under(d, "agent") || under(pkg, "agent") && under(d, "gateway") {
				t.Errorf("%s depends on %s: gateway and agent share only proto", pkg, d)
			}
		}
		// 4. The pure packages import nothing of ours beyond proto.
		for _, pure := range []string{"scheduler", "keyring", "migrations", "internal/simengine"} {
			if !under(pkg, pure) {
				continue
			}
			for _, d := range deps {
				if ours(d) && !under(d, pure) && !under(d, "proto") {
					t.Errorf("%s imports %s: %s imports nothing of ours beyond proto", pkg, d, pure)
				}
			}
		}
		if under(pkg, "scheduler") {
			for _, d := range deps {
				if d == "net/http" || strings.HasPrefix(d, "github.com/jackc/pgx") || strings.HasPrefix(d, "github.com/redis/go-redis") {
					t.Errorf("%s imports %s: the scheduler reads a snapshot and does no I/O", pkg, d)
				}
			}
		}
	}
}

func allowedForCmd(pkg, dep string) bool {
	name := strings.TrimPrefix(pkg, mod+"/cmd/")
	switch name {
	case "switchyard":
		// The dev demo runs a node agent in-process: main hands the agent's
		// entry point to the gateway's app, which never imports it.
		return dep == mod+"/gateway/app" || dep == mod+"/agent/app"
	case "switchyard-agent":
		return dep == mod+"/agent/app"
	case "simengine":
		return dep == mod+"/internal/simengine"
	}
	return false
}
