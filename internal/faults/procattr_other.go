//go:build !linux

package faults

import "syscall"

// procAttr puts the server in a process group of its own (so that a signal
// reaches its children too) and runs it as cred when set.
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// descendants is not known here; signals go to the process group only.
func descendants(int) []int { return nil }

// zombie is not known here.
func zombie(int) bool { return false }
