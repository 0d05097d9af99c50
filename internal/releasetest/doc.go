// Package releasetest holds the tests of scripts/release.sh and of the
// gateway's Dockerfile: the build matrix, cgo, the stamped version and the
// checksums (with a stand-in go command, so that the test takes seconds;
// the CI entry point runs the real cross-builds), and the image's base,
// binary, user and entry point (no container runtime is needed).
package releasetest
