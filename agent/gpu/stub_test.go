//go:build !linux || !cgo

package gpu

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestStubReportsNoGPUsOnce(t *testing.T) {
	var buf bytes.Buffer
	c := New(slog.New(slog.NewJSONHandler(&buf, nil)))
	for range 3 {
		got, err := c.Collect(context.Background())
		if err != nil || len(got) != 0 {
			t.Fatalf("Collect = %v, %v", got, err)
		}
	}
	if !strings.HasPrefix(c.Note(), "no NVIDIA GPU") {
		t.Errorf("Note() = %q", c.Note())
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Errorf("logged %d lines, want 1:\n%s", n, buf.String())
	}
}
