package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, "v1.2.3"},
		{[]debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123"}}, "v1.2.3 (0123456789ab)"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "0123"}}, "v1.2.3"}, // too short to be a commit
	} {
		if got := describe("v1.2.3", c.settings); got != c.want {
			t.Errorf("describe(%v) = %q, want %q", c.settings, got, c.want)
		}
	}
	if got := Describe("v9"); len(got) < 2 || got[:2] != "v9" {
		t.Errorf("Describe(v9) = %q, want it to start with the stamped version", got)
	}
}
