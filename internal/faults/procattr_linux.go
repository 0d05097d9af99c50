package faults

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// procAttr puts the server in a process group of its own (so that a signal
// reaches its children too), runs it as cred when set, and has the kernel
// kill it if the test process dies first, so that no server outlives its
// test.
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
}

// descendants lists the processes below pid. PostgreSQL puts every backend
// in a session of its own (setsid), so signalling the server's process
// group does not reach them; freezing a server means freezing each.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid …"; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			parent[n] = pp
		}
	}
	var out []int
	frontier := []int{pid}
	for len(frontier) > 0 {
		p := frontier[0]
		frontier = frontier[1:]
		for child, pp := range parent {
			if pp == p {
				out = append(out, child)
				frontier = append(frontier, child)
			}
		}
	}
	return out
}

// zombie reports whether pid has exited and waits for its parent to reap it.
func zombie(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // gone
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}
