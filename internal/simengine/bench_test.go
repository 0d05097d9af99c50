package simengine

import (
	"io"
	"net/http"
	"testing"
)

// The simulator's own overhead per request, with no simulated delays: the
// floor under any benchmark of the gateway that runs against it.

func BenchmarkChatCompletion(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "stream"}[stream]
		b.Run(name, func(b *testing.B) {
			_, srv := newEngine(b, Config{Models: []string{"m"}})
			body := chatBody("m", "a short prompt for the engine", map[string]any{"max_tokens": 64, "stream": stream})
			for b.Loop() {
				resp, err := post(b.Context(), srv.URL+"/v1/chat/completions", body)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
