package upstream

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll reads every event, returning each one re-serialised and its data.
func readAll(r *SSEReader) (raw, data []string, err error) {
	for {
		e, err := r.Next()
		if err != nil {
			return raw, data, err
		}
		var b bytes.Buffer
		if err := WriteEvent(&b, e); err != nil {
			return raw, data, err
		}
		raw, data = append(raw, b.String()), append(data, string(e.Data()))
	}
}

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		max     int
		raw     []string
		data    []string
		wantErr error
	}{
		{
			name: "events in order",
			in:   "data: a\n\ndata: b\n\ndata: [DONE]\n\n",
			raw:  []string{"data: a\n\n", "data: b\n\n", "data: [DONE]\n\n"},
			data: []string{"a", "b", "[DONE]"},
		},
		{
			name: "crlf",
			in:   "data: a\r\n\r\ndata: b\r\n\r\n",
			raw:  []string{"data: a\r\n\r\n", "data: b\r\n\r\n"},
			data: []string{"a", "b"},
		},
		{
			name: "mixed endings",
			in:   "data: a\r\n\ndata: b\n\r\n",
			raw:  []string{"data: a\r\n\n", "data: b\n\r\n"},
			data: []string{"a", "b"},
		},
		{
			name: "multi-line data",
			in:   "data: one\ndata: two\ndata:three\ndata\n\n",
			raw:  []string{"data: one\ndata: two\ndata:three\ndata\n\n"},
			data: []string{"one\ntwo\nthree\n"},
		},
		{
			name: "comments and other fields kept",
			in:   ": ping\n\nevent: delta\nid: 42\nretry: 1000\nx-vendor: y\ndata: {\"a\":1}\n\n",
			raw:  []string{": ping\n\n", "event: delta\nid: 42\nretry: 1000\nx-vendor: y\ndata: {\"a\":1}\n\n"},
			data: []string{"", `{"a":1}`},
		},
		{
			name: "data bytes kept exactly",
			in:   "data:  two spaces \t\n\n",
			raw:  []string{"data:  two spaces \t\n\n"},
			data: []string{" two spaces \t"},
		},
		{
			name: "not a data field",
			in:   "database: x\ndata2: y\n\n",
			raw:  []string{"database: x\ndata2: y\n\n"},
			data: []string{""},
		},
		{
			name: "lone blank lines are events too",
			in:   "\n\ndata: a\n\n",
			raw:  []string{"\n", "\n", "data: a\n\n"},
			data: []string{"", "", "a"},
		},
		{
			name: "no trailing blank line",
			in:   "data: a\n\ndata: b\n",
			raw:  []string{"data: a\n\n", "data: b\n"},
			data: []string{"a", "b"},
		},
		{
			name: "last line cut off",
			in:   "data: a\n\ndata: b",
			raw:  []string{"data: a\n\n", "data: b"},
			data: []string{"a", "b"},
		},
		{
			name: "lone CR stays in the line",
			in:   "data: a\rb\n\n",
			raw:  []string{"data: a\rb\n\n"},
			data: []string{"a\rb"},
		},
		{name: "empty", in: ""},
		{
			name: "line at the cap",
			in:   "data: " + strings.Repeat("x", 10) + "\r\n\r\n",
			max:  16,
			raw:  []string{"data: " + strings.Repeat("x", 10) + "\r\n\r\n"},
			data: []string{strings.Repeat("x", 10)},
		},
		{
			name:    "line over the cap",
			in:      "data: ok\n\ndata: " + strings.Repeat("x", 11) + "\n\ndata: never\n\n",
			max:     16,
			raw:     []string{"data: ok\n\n"},
			data:    []string{"ok"},
			wantErr: ErrLineTooLong,
		},
		{
			name:    "endless line",
			in:      "data: " + strings.Repeat("x", 1<<16),
			max:     1024,
			wantErr: ErrLineTooLong,
		},
		{
			name:    "cut-off line over the cap",
			in:      "data: " + strings.Repeat("x", 11),
			max:     16,
			wantErr: ErrLineTooLong,
		},
		{
			name:    "event over twice the cap",
			in:      strings.Repeat("data: 0123456789\n", 4) + "\n",
			max:     16,
			wantErr: ErrEventTooLarge,
		},
	}
	for _, tt := range tests {
		for _, reader := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{
			{"whole", func(r io.Reader) io.Reader { return r }},
			{"one byte", iotest.OneByteReader},
			{"half", iotest.HalfReader},
		} {
			t.Run(tt.name+"/"+reader.name, func(t *testing.T) {
				raw, data, err := readAll(NewSSEReader(reader.wrap(strings.NewReader(tt.in)), tt.max))
				want := tt.wantErr
				if want == nil {
					want = io.EOF
				}
				if !errors.Is(err, want) {
					t.Errorf("error = %v, want %v", err, want)
				}
				if !equalStrings(raw, tt.raw) {
					t.Errorf("raw events = %q, want %q", raw, tt.raw)
				}
				if !equalStrings(data, tt.data) {
					t.Errorf("data = %q, want %q", data, tt.data)
				}
			})
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSSEReaderLargeDataLine(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), (2<<20)/16) // 2 MiB
	in := append(append([]byte("data: "), payload...), "\n\ndata: next\n\n"...)
	r := NewSSEReader(iotest.HalfReader(bytes.NewReader(in)), 0)
	e, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(e.Data(), payload) {
		t.Fatalf("2 MiB data line came back as %d bytes", len(e.Data()))
	}
	if e, err := r.Next(); err != nil || string(e.Data()) != "next" {
		t.Fatalf("event after the large one = %q, %v", e.Data(), err)
	}
}

func TestSSEReaderStickyError(t *testing.T) {
	r := NewSSEReader(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\ndata: b\n\n"), 16)
	for range 3 {
		if _, err := r.Next(); !errors.Is(err, ErrLineTooLong) {
			t.Fatalf("Next = %v, want ErrLineTooLong every time", err)
		}
	}
}

func TestSSEReaderReadErrorDropsPartialEvent(t *testing.T) {
	boom := errors.New("boom")
	r := NewSSEReader(io.MultiReader(strings.NewReader("data: a\n\ndata: half"), iotest.ErrReader(boom)), 0)
	if e, err := r.Next(); err != nil || string(e.Data()) != "a" {
		t.Fatalf("first = %q, %v", e.Data(), err)
	}
	if e, err := r.Next(); !errors.Is(err, boom) || len(e.Lines) != 0 {
		t.Fatalf("second = %q, %v; want no lines and the read error", e.Lines, err)
	}
}

func TestEventDataDoesNotClobberBuffer(t *testing.T) {
	r := NewSSEReader(strings.NewReader("data: a\ndata: b\n\n"), 0)
	e, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Data(); string(d) != "a\nb" {
		t.Fatalf("Data = %q", d)
	}
	var b bytes.Buffer
	WriteEvent(&b, e)
	if b.String() != "data: a\ndata: b\n\n" {
		t.Errorf("event changed by Data: %q", b.String())
	}
}

func TestIsDone(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"data: [DONE]\n\n", true},
		{"data:[DONE]\r\n\r\n", true},
		{"data: [DONE] \n\n", true},
		{"data: {\"done\":true}\n\n", false},
		{": [DONE]\n\n", false},
		{"event: done\n\n", false},
	}
	for _, tt := range tests {
		e, err := NewSSEReader(strings.NewReader(tt.in), 0).Next()
		if err != nil {
			t.Fatal(err)
		}
		if got := IsDone(e); got != tt.want {
			t.Errorf("IsDone(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, io.ErrClosedPipe
	}
	w.n--
	return len(p), nil
}

func TestWriteEventReportsWriteError(t *testing.T) {
	e := Event{Lines: [][]byte{[]byte("data: a\n"), []byte("\n")}}
	if err := WriteEvent(&failWriter{n: 1}, e); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("WriteEvent = %v", err)
	}
}

// FuzzSSEReader: for any input and cap, Next never panics, never returns a
// line longer than the cap or an event larger than twice the cap, always
// ends, and what it returns re-serialises to a prefix of the input — all of
// it when the stream ends cleanly.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: hello\n\n"), uint16(64))
	f.Fuzz(func(t *testing.T, in []byte, capSeed uint16) {
		limit := int(capSeed%512) + 1
		r := NewSSEReader(bytes.NewReader(in), limit)
		var out bytes.Buffer
		for i := 0; ; i++ {
			if i > len(in)+1 {
				t.Fatalf("more events than bytes of input")
			}
			e, err := r.Next()
			if err != nil {
				if err == io.EOF && !bytes.Equal(out.Bytes(), in) {
					t.Fatalf("clean end, but re-serialised %q != input %q", out.Bytes(), in)
				}
				if err != io.EOF && !errors.Is(err, ErrLineTooLong) && !errors.Is(err, ErrEventTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				break
			}
			size := 0
			for _, l := range e.Lines {
				if n := len(trimEOL(l)); n > limit {
					t.Fatalf("line of %d bytes returned with cap %d", n, limit)
				}
				size += len(l)
			}
			if size > 2*limit+limit+2 {
				t.Fatalf("event of %d bytes returned with cap %d", size, limit)
			}
			WriteEvent(&out, e)
			if !bytes.HasPrefix(in, out.Bytes()) {
				t.Fatalf("re-serialised %q is not a prefix of the input", out.Bytes())
			}
			e.Data()
			IsDone(e)
		}
	})
}

func benchStream(n int) []byte {
	var b bytes.Buffer
	for range n {
		b.WriteString(`data: {"id":"chatcmpl-9a8b7c","object":"chat.completion.chunk","created":1733000000,"model":"gemma4:26b","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

func BenchmarkSSEReader(b *testing.B) {
	in := benchStream(1000)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewSSEReader(bytes.NewReader(in), 0)
		for {
			e, err := r.Next()
			if err != nil {
				break
			}
			if err := WriteEvent(io.Discard, e); err != nil {
				b.Fatal(err)
			}
			IsDone(e)
		}
	}
}

func BenchmarkSSEReaderLargeLine(b *testing.B) {
	in := append(append([]byte("data: "), bytes.Repeat([]byte("x"), 2<<20)...), "\n\n"...)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewSSEReader(bytes.NewReader(in), 0)
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
}
