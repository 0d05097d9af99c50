package releasetest

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type instruction struct {
	cmd, args string
	line      int
}

// parseDockerfile reads the instructions, joining continued lines and
// dropping comments.
func parseDockerfile(t *testing.T) []instruction {
	t.Helper()
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args), start})
		cur.Reset()
	}
	return out
}

// The image packs the gateway binary release.sh builds, on a minimal base,
// as a non-root user, with the entry point and ports the chart expects.
func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t)
	byCmd := map[string][]instruction{}
	for _, in := range ins {
		byCmd[in.cmd] = append(byCmd[in.cmd], in)
	}

	from := byCmd["FROM"]
	if len(from) != 1 {
		t.Fatalf("want one stage, got %d FROM", len(from))
	}
	base := from[0].args
	if !regexp.MustCompile(`^(gcr\.io/distroless/static-debian\d+:nonroot|scratch)$`).MatchString(base) {
		t.Errorf("base %q: want distroless static (nonroot) or scratch", base)
	}
	// Nothing runs inside the build (the base has no shell), and nothing
	// is fetched.
	for _, banned := range []string{"RUN", "ADD", "MAINTAINER"} {
		if len(byCmd[banned]) > 0 {
			t.Errorf("%s at line %d", banned, byCmd[banned][0].line)
		}
	}

	copies := byCmd["COPY"]
	if len(copies) != 1 {
		t.Fatalf("want one COPY, got %d", len(copies))
	}
	fields := strings.Fields(copies[0].args)
	if len(fields) != 2 || fields[0] != "switchyard-linux-${TARGETARCH}" || fields[1] != "/usr/local/bin/switchyard" {
		t.Errorf("COPY %q: want the release's switchyard-linux-${TARGETARCH} as /usr/local/bin/switchyard", copies[0].args)
	}
	argAt := slices.IndexFunc(ins, func(in instruction) bool { return in.cmd == "ARG" && in.args == "TARGETARCH" })
	copyAt := slices.IndexFunc(ins, func(in instruction) bool { return in.cmd == "COPY" })
	if argAt < 0 || argAt > copyAt {
		t.Errorf("ARG TARGETARCH must come before the COPY that uses it")
	}
	// release.sh names its linux gateway builds so.
	release, err := os.ReadFile("../../scripts/release.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(release), "dest=$out/$1-$4-$5") || !strings.Contains(string(release), "build switchyard cmd/switchyard gateway/app") {
		t.Errorf("release.sh no longer writes switchyard-<os>-<arch>; the Dockerfile's COPY must follow it")
	}

	users := byCmd["USER"]
	if len(users) == 0 {
		t.Fatal("no USER: the image would run as root")
	}
	user := users[len(users)-1].args
	if !regexp.MustCompile(`^[1-9][0-9]*(:[1-9][0-9]*)?$`).MatchString(user) {
		t.Errorf("USER %q: want a numeric non-root uid, so that runAsNonRoot can check it", user)
	}
	values, err := os.ReadFile("../../charts/switchyard/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	uid, _, _ := strings.Cut(user, ":")
	if !strings.Contains(string(values), "runAsUser: "+uid+"\n") {
		t.Errorf("the chart's runAsUser is not the image's user %s", uid)
	}

	exec := func(cmd string) []string {
		t.Helper()
		in := byCmd[cmd]
		if len(in) != 1 {
			t.Fatalf("want one %s", cmd)
		}
		var argv []string
		if err := json.Unmarshal([]byte(in[0].args), &argv); err != nil {
			t.Fatalf("%s %s: want the JSON (exec) form, which gets signals directly: %v", cmd, in[0].args, err)
		}
		return argv
	}
	if got := exec("ENTRYPOINT"); !slices.Equal(got, []string{"/usr/local/bin/switchyard"}) {
		t.Errorf("ENTRYPOINT %v", got)
	}
	if got := exec("CMD"); !slices.Equal(got, []string{"serve"}) {
		t.Errorf("CMD %v", got)
	}
	var ports []string
	for _, in := range byCmd["EXPOSE"] {
		ports = append(ports, strings.Fields(in.args)...)
	}
	slices.Sort(ports)
	if !slices.Equal(ports, []string{"8080", "9090", "9100"}) {
		t.Errorf("EXPOSE %v", ports)
	}
}
