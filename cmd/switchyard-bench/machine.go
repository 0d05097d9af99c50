package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// Machine describes where a run happened.
type Machine struct {
	CPU          string  `json:"cpu"`
	Cores        int     `json:"cores"`
	MemoryGiB    float64 `json:"memory_gib"`
	Kernel       string  `json:"kernel"`
	OS           string  `json:"os"`
	Go           string  `json:"go"`
	Nginx        string  `json:"nginx,omitempty"`
	Postgres     string  `json:"postgres,omitempty"`
	Redis        string  `json:"redis,omitempty"`
	LoadAvgStart string  `json:"load_average_start"`
	LoadAvgEnd   string  `json:"load_average_end,omitempty"`
	FileLimit    uint64  `json:"open_file_limit"`
	CPUMHz       float64 `json:"cpu_mhz,omitempty"`
	// Revision is the commit measured, "+ uncommitted changes" when the
	// working tree differs from it.
	Revision string `json:"revision,omitempty"`
}

func describeMachine(goTool string) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPU, m.CPUMHz = parseCPUInfo(raw)
	}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemoryGiB = parseMemTotal(raw)
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(raw))
	}
	if raw, err := os.ReadFile("/etc/os-release"); err == nil {
		m.OS = osPrettyName(raw)
	}
	if goTool != "" {
		if out, err := exec.Command(goTool, "env", "GOVERSION").Output(); err == nil {
			if v := strings.TrimSpace(string(out)); v != "" {
				m.Go = v
			}
		}
	}
	m.LoadAvgStart = loadAverage()
	m.Revision = revision()
	return m
}

// revision describes the code being measured, when run in a git checkout.
func revision() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += " + uncommitted changes"
	}
	return rev
}

func parseCPUInfo(raw []byte) (model string, mhz float64) {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case k == "model name" && model == "":
			model = v
		case k == "cpu MHz" && mhz == 0:
			mhz, _ = strconv.ParseFloat(v, 64)
		}
	}
	if model == "" {
		model = "unknown"
	}
	return model, mhz
}

func parseMemTotal(raw []byte) float64 {
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb / (1 << 20)
			}
		}
	}
	return 0
}

func osPrettyName(raw []byte) string {
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute figures: how much
// else the CPUs were doing, which a benchmark on shared cores must say.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
