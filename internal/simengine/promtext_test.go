package simengine

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

// A strict reader of the Prometheus text exposition format (0.0.4), enough to
// prove that what the flavours serve is what a Prometheus server or an
// expfmt-based adapter would accept: metric and label name syntax, quoting and
// escapes, float values, one HELP and one TYPE per family, TYPE before the
// family's samples, and a family's samples kept together.

// isName reports whether s is a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or,
// without colons, a label name ([a-zA-Z_][a-zA-Z0-9_]*).
func isName(s string, colons bool) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		ok := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (colons && c == ':') ||
			(i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

type promSample struct {
	labels map[string]string
	value  float64
}

type promFamily struct {
	typ, help string
	samples   []promSample
}

// parseExposition parses text, returning its families by name.
func parseExposition(text string) (map[string]*promFamily, error) {
	fams := make(map[string]*promFamily)
	seenSamples := make(map[string]bool) // families whose samples have started
	current := ""
	family := func(name string) *promFamily {
		f := fams[name]
		if f == nil {
			f = &promFamily{}
			fams[name] = f
		}
		return f
	}
	if text != "" && !strings.HasSuffix(text, "\n") {
		return nil, fmt.Errorf("exposition does not end with a newline")
	}
	for n, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		n++
		if strings.TrimSpace(line) == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "#"); ok {
			fields := strings.Fields(rest)
			if len(fields) < 2 || (fields[0] != "HELP" && fields[0] != "TYPE") {
				continue // a plain comment
			}
			name := fields[1]
			if !isName(name, true) {
				return nil, fmt.Errorf("line %d: bad metric name %q", n, name)
			}
			f := family(name)
			switch fields[0] {
			case "HELP":
				if f.help != "" {
					return nil, fmt.Errorf("line %d: second HELP for %s", n, name)
				}
				f.help = strings.Join(fields[2:], " ")
				if f.help == "" {
					f.help = " "
				}
			case "TYPE":
				if f.typ != "" {
					return nil, fmt.Errorf("line %d: second TYPE for %s", n, name)
				}
				if seenSamples[name] {
					return nil, fmt.Errorf("line %d: TYPE for %s after its samples", n, name)
				}
				if len(fields) != 3 {
					return nil, fmt.Errorf("line %d: TYPE needs one type", n)
				}
				switch fields[2] {
				case "counter", "gauge", "histogram", "summary", "untyped":
				default:
					return nil, fmt.Errorf("line %d: unknown type %q", n, fields[2])
				}
				f.typ = fields[2]
			}
			continue
		}
		name, s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w: %q", n, err, line)
		}
		if name != current && seenSamples[name] {
			return nil, fmt.Errorf("line %d: samples of %s are not together", n, name)
		}
		current = name
		seenSamples[name] = true
		f := family(name)
		f.samples = append(f.samples, s)
	}
	return fams, nil
}

func parseSample(line string) (string, promSample, error) {
	s := promSample{labels: map[string]string{}}
	end := strings.IndexAny(line, "{ ")
	if end < 0 {
		return "", s, fmt.Errorf("no value")
	}
	name := line[:end]
	if !isName(name, true) {
		return "", s, fmt.Errorf("bad metric name %q", name)
	}
	rest := line[end:]
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for {
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq < 0 {
				return "", s, fmt.Errorf("label without '='")
			}
			lname := rest[:eq]
			if !isName(lname, false) {
				return "", s, fmt.Errorf("bad label name %q", lname)
			}
			rest = rest[eq+1:]
			if !strings.HasPrefix(rest, `"`) {
				return "", s, fmt.Errorf("label value not quoted")
			}
			rest = rest[1:]
			var val strings.Builder
			closed := false
			for i := 0; i < len(rest); i++ {
				c := rest[i]
				if c == '\\' {
					if i+1 >= len(rest) {
						return "", s, fmt.Errorf("dangling escape")
					}
					i++
					switch rest[i] {
					case '\\':
						val.WriteByte('\\')
					case '"':
						val.WriteByte('"')
					case 'n':
						val.WriteByte('\n')
					default:
						return "", s, fmt.Errorf("bad escape \\%c", rest[i])
					}
					continue
				}
				if c == '"' {
					rest = rest[i+1:]
					closed = true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return "", s, fmt.Errorf("unterminated label value")
			}
			if _, dup := s.labels[lname]; dup {
				return "", s, fmt.Errorf("duplicate label %q", lname)
			}
			s.labels[lname] = val.String()
			if strings.HasPrefix(rest, ",") {
				rest = rest[1:]
			}
		}
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 || !strings.HasPrefix(rest, " ") {
		return "", s, fmt.Errorf("want a value and an optional timestamp")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil && !strings.EqualFold(fields[0], "nan") && !strings.EqualFold(fields[0], "+inf") && !strings.EqualFold(fields[0], "-inf") {
		return "", s, fmt.Errorf("bad value %q", fields[0])
	}
	if math.IsNaN(v) && !strings.EqualFold(fields[0], "nan") {
		return "", s, fmt.Errorf("bad value %q", fields[0])
	}
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return "", s, fmt.Errorf("bad timestamp %q", fields[1])
		}
	}
	s.value = v
	return name, s, nil
}

// value returns the one sample of name whose labels include want.
func (f *promFamily) value(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	var found []float64
	for _, s := range f.samples {
		match := true
		for k, v := range want {
			if s.labels[k] != v {
				match = false
			}
		}
		if match {
			found = append(found, s.value)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: want one sample, found %d", name, want, len(found))
	}
	return found[0]
}

func TestParseExposition(t *testing.T) {
	good := "# HELP a:b Some help.\n# TYPE a:b gauge\na:b{model_name=\"m \\\"q\\\" \\\\ \\n\",x=\"1\"} 1.0\na:b 2\n# TYPE c counter\nc_total 3 1700000000000\n"
	fams, err := parseExposition(good)
	if err != nil {
		t.Fatalf("good exposition rejected: %v", err)
	}
	if got := fams["a:b"].samples[0].labels["model_name"]; got != "m \"q\" \\ \n" {
		t.Errorf("label value unescaped to %q", got)
	}
	bad := map[string]string{
		"bad name":         "1a 1\n",
		"bad label name":   "a{1x=\"v\"} 1\n",
		"unquoted label":   "a{x=v} 1\n",
		"bad escape":       "a{x=\"\\t\"} 1\n",
		"bad value":        "a one\n",
		"type after":       "a 1\n# TYPE a gauge\n",
		"two types":        "# TYPE a gauge\n# TYPE a gauge\n",
		"unknown type":     "# TYPE a thing\n",
		"split family":     "a 1\nb 1\na 2\n",
		"no final newline": "a 1",
	}
	for name, text := range bad {
		t.Run(name, func(t *testing.T) {
			if _, err := parseExposition(text); err == nil {
				t.Errorf("accepted %q", text)
			}
		})
	}
}
