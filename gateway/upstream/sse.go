package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// ErrLineTooLong ends a stream whose line is longer than the reader's cap. A
// 2 MiB data line is fine under the default 4 MiB cap; an endless one is cut
// here instead of growing a buffer without bound.
var ErrLineTooLong = errors.New("upstream: SSE line longer than the limit")

// ErrEventTooLarge ends a stream whose event, counted over all its lines,
// exceeds twice the line cap: many short lines without a blank line between
// them must not grow a buffer without bound either.
var ErrEventTooLarge = errors.New("upstream: SSE event larger than the limit")

// Event is one Server-Sent Event exactly as the upstream sent it, so that it
// can be forwarded byte for byte: comments, ids, retry fields and unknown
// fields are kept with the data.
type Event struct {
	// Lines are the event's lines in order, each with the terminator it
	// arrived with ("\n" or "\r\n"). The blank line that ended the event is
	// the last one; it is missing only when the stream ended without it,
	// and a final line cut off by the end of the stream has no terminator.
	// They point into the reader's buffer and are valid until the next call
	// to Next; copy what must live longer.
	Lines [][]byte
}

// Data returns the event's data as the SSE specification assembles it: the
// values of its data fields joined by "\n", nil when it has none. With one
// data line (the usual case) it is a slice of that line, not a copy.
func (e Event) Data() []byte {
	var out []byte
	n := 0
	for _, l := range e.Lines {
		v, ok := fieldValue(l, "data")
		if !ok {
			continue
		}
		n++
		switch n {
		case 1:
			out = v
			continue
		case 2:
			// Copy before appending: out still points into the reader's
			// buffer, and appending in place would overwrite what follows.
			out = append(append(make([]byte, 0, len(out)+1+len(v)), out...), '\n')
		default:
			out = append(out, '\n')
		}
		out = append(out, v...)
	}
	return out
}

// fieldValue returns the value of line if it is the field name: after the
// colon, less one leading space; "data" alone is the field with an empty
// value.
func fieldValue(line []byte, name string) ([]byte, bool) {
	line = trimEOL(line)
	if len(line) < len(name) || string(line[:len(name)]) != name {
		return nil, false
	}
	rest := line[len(name):]
	if len(rest) == 0 {
		return rest, true
	}
	if rest[0] != ':' {
		return nil, false
	}
	rest = rest[1:]
	if len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	return rest, true
}

func trimEOL(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
		if n > 1 && line[n-2] == '\r' {
			line = line[:n-2]
		}
	}
	return line
}

// IsDone reports the OpenAI end-of-stream marker, "data: [DONE]".
func IsDone(e Event) bool {
	return string(bytes.TrimSpace(e.Data())) == "[DONE]"
}

// WriteEvent writes e exactly as it was received.
func WriteEvent(w io.Writer, e Event) error {
	for _, l := range e.Lines {
		if _, err := w.Write(l); err != nil {
			return err
		}
	}
	return nil
}

// SSEReader splits a Server-Sent Events body into events. Lines end with
// "\n" or "\r\n"; a lone "\r" is kept as part of its line (no upstream we
// proxy ends lines with it, and treating it as an end would have to wait for
// the next byte to tell it from "\r\n", holding back an event that has
// already arrived).
//
// Memory is bounded: a line longer than the cap ends the stream with
// ErrLineTooLong, an event longer than twice the cap with ErrEventTooLarge,
// and the reader never holds more than that plus its read buffer. It reads
// only what it is asked for, so events are passed on as they arrive; a
// wait between reads is bounded by the idle timeout of the Response body it
// reads.
type SSEReader struct {
	br    *bufio.Reader
	max   int
	buf   []byte   // the current event's bytes
	ends  []int    // where each of its lines ends in buf
	lines [][]byte // reused for Event.Lines
	err   error    // sticky: once set, Next returns it
}

// readBufSize is the bufio buffer. Small on purpose: it is held for the
// whole life of a stream, and thousands of streams may be open; a longer
// line is assembled from several reads. It reads from the HTTP client's own
// buffered connection, so a small buffer costs copies, not system calls.
const readBufSize = 512

// keepBufBytes bounds the event buffer kept between events: after an
// unusually large event its memory is given back.
const keepBufBytes = 64 << 10

// NewSSEReader reads events from r with lines capped at maxLineBytes
// (excluding the line terminator); 0 or less means DefaultMaxLineBytes.
func NewSSEReader(r io.Reader, maxLineBytes int) *SSEReader {
	if maxLineBytes <= 0 {
		maxLineBytes = DefaultMaxLineBytes
	}
	return &SSEReader{br: bufio.NewReaderSize(r, min(readBufSize, maxLineBytes+2)), max: maxLineBytes}
}

// Next returns the next event. At the end of the stream it returns io.EOF;
// after a line over the cap, ErrLineTooLong; after a read failure, that
// failure. A partial event is delivered only at a clean io.EOF, never after
// an error. Once Next has returned an error it keeps returning it.
func (s *SSEReader) Next() (Event, error) {
	if s.err != nil {
		return Event{}, s.err
	}
	if cap(s.buf) > keepBufBytes {
		s.buf = nil
	}
	s.buf, s.ends = s.buf[:0], s.ends[:0]
	for {
		start := len(s.buf)
		err := s.readLine()
		if err == nil {
			s.ends = append(s.ends, len(s.buf))
			if len(trimEOL(s.buf[start:])) == 0 {
				return s.event(), nil
			}
			if len(s.buf) > 2*s.max {
				return s.fail(ErrEventTooLarge)
			}
			continue
		}
		if err == io.EOF {
			if len(s.buf) > start {
				s.ends = append(s.ends, len(s.buf))
			}
			s.err = io.EOF
			if len(s.ends) > 0 {
				return s.event(), nil
			}
			return Event{}, io.EOF
		}
		return s.fail(err)
	}
}

func (s *SSEReader) fail(err error) (Event, error) {
	s.err = err
	s.buf, s.ends = s.buf[:0], s.ends[:0]
	return Event{}, err
}

// readLine appends one line, terminator included, to buf. At io.EOF the
// partial line (possibly empty) is left in buf.
func (s *SSEReader) readLine() error {
	start := len(s.buf)
	for {
		chunk, err := s.br.ReadSlice('\n')
		s.buf = append(s.buf, chunk...)
		n := len(s.buf) - start
		switch err {
		case nil:
			if len(trimEOL(s.buf[start:])) > s.max {
				return ErrLineTooLong
			}
			return nil
		case bufio.ErrBufferFull:
			// One byte of slack: a trailing '\r' may be the first half of
			// the terminator.
			if n > s.max+1 {
				return ErrLineTooLong
			}
		case io.EOF:
			if n > s.max {
				return ErrLineTooLong
			}
			return io.EOF
		default:
			return err
		}
	}
}

func (s *SSEReader) event() Event {
	s.lines = s.lines[:0]
	prev := 0
	for _, end := range s.ends {
		// A full slice expression, so that appending to a line cannot
		// overwrite the next one.
		s.lines = append(s.lines, s.buf[prev:end:end])
		prev = end
	}
	return Event{Lines: s.lines}
}
