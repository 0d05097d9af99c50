// Package buildinfo names the running binary's version the same way for
// the gateway and the agent.
package buildinfo

import "runtime/debug"

// Describe returns stamped (the version set at build time with -ldflags
// -X) followed by the commit the binary was built from, where the Go
// toolchain recorded one: "v1.2.3 (0123456789ab)".
func Describe(stamped string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return stamped
	}
	return describe(stamped, bi.Settings)
}

func describe(stamped string, settings []debug.BuildSetting) string {
	for _, s := range settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return stamped + " (" + s.Value[:12] + ")"
		}
	}
	return stamped
}
