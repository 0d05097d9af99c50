package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinary builds the command, runs it as a process on a free port, waits
// for its announcement, serves a request and stops it with SIGTERM.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "simengine")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--model", "gemma3:4b", "--flavor", "ollama", "--slots", "2")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, r)
		exited <- cmd.Wait()
		close(exited)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatalf("no announcement; stderr:\n%s", stderr.String())
	}
	url, rest, ok := strings.Cut(strings.TrimPrefix(line, "simengine listening on "), " ")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") || rest != "(flavor ollama, models gemma3:4b)\n" {
		t.Fatalf("announcement %q", line)
	}

	body := `{"model":"gemma3:4b","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var chat struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	err = json.NewDecoder(resp.Body).Decode(&chat)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || chat.Usage.CompletionTokens != 2 {
		t.Errorf("chat: %d %v %+v", resp.StatusCode, err, chat)
	}
	resp, err = http.Get(url + "/api/ps")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/ps: %d", resp.StatusCode)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("did not exit after SIGTERM")
	}
}
