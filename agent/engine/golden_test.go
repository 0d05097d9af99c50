package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

var update = flag.Bool("update", false, "rewrite the status.golden.json files under testdata")

// Each folder under testdata/<kind>/ (and its sub-folders) that holds engine
// answers is one case: a fake engine serves those files, the adapter of
// <kind> probes it, and the Status must equal status.golden.json.
//
// An engine path maps to a file name (routes); a file named <name>.<code>.*
// is served with that status instead of 200, and a missing file is a 404.
// options.json, when present, sets the adapter's options and what error the
// probe must return.
var routes = map[string]string{
	"/metrics":         "metrics",
	"/v1/models":       "v1_models",
	"/info":            "info",
	"/props":           "props",
	"/slots":           "slots",
	"/server_info":     "server_info",
	"/get_server_info": "get_server_info",
	"/get_model_info":  "get_model_info",
	"/api/tags":        "tags",
	"/api/ps":          "ps",
}

const goldenName = "status.golden.json"

type caseOptions struct {
	Models              []string          `json:"models"`
	Slots               int               `json:"slots"`
	Env                 map[string]string `json:"env"`
	ExpectQueueUnknown  bool              `json:"expect_queue_unknown"`
	ExpectErrorContains string            `json:"expect_error_contains"`
}

func TestGolden(t *testing.T) {
	dirs := caseDirs(t)
	if len(dirs) == 0 {
		t.Fatal("no cases under testdata")
	}
	seen := map[string]bool{}
	for _, dir := range dirs {
		rel, _ := filepath.Rel("testdata", dir)
		kind := strings.Split(filepath.ToSlash(rel), "/")[0]
		seen[kind] = true
		t.Run(filepath.ToSlash(rel), func(t *testing.T) {
			co := readCaseOptions(t, dir)
			srv := httptest.NewServer(fakeEngine(t, dir))
			t.Cleanup(srv.Close)
			a, err := New(kind, srv.URL, srv.Client(), Options{
				Models: co.Models,
				Slots:  co.Slots,
				Getenv: func(k string) string { return co.Env[k] },
			})
			if err != nil {
				t.Fatal(err)
			}
			if a.Kind() != kind {
				t.Errorf("Kind() = %q, want %q", a.Kind(), kind)
			}
			st, err := a.Probe(context.Background())
			switch {
			case co.ExpectQueueUnknown && !errors.Is(err, ErrQueueUnknown):
				t.Fatalf("Probe error = %v, want one wrapping ErrQueueUnknown", err)
			case !co.ExpectQueueUnknown && err != nil:
				t.Fatalf("Probe: %v", err)
			}
			if co.ExpectErrorContains != "" && (err == nil || !strings.Contains(err.Error(), co.ExpectErrorContains)) {
				t.Errorf("Probe error = %v, want it to say %q", err, co.ExpectErrorContains)
			}
			checkGolden(t, filepath.Join(dir, goldenName), st)
		})
	}
	for _, k := range Kinds() {
		if !seen[k] {
			t.Errorf("no golden case for engine kind %q", k)
		}
	}
}

// caseDirs lists the folders under testdata that hold at least one engine
// answer.
func caseDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir("testdata", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || path == "testdata" {
			return err
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !e.IsDir() && e.Name() != goldenName && e.Name() != "options.json" {
				dirs = append(dirs, path)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

func readCaseOptions(t *testing.T, dir string) caseOptions {
	t.Helper()
	var co caseOptions
	data, err := os.ReadFile(filepath.Join(dir, "options.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return co
	}
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&co); err != nil {
		t.Fatalf("%s/options.json: %v", dir, err)
	}
	return co
}

// fakeEngine serves a case folder as an engine would.
func fakeEngine(t *testing.T, dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := routes[r.URL.Path]
		switch {
		case r.URL.Path == "/api/show" && r.Method == http.MethodPost:
			var req struct {
				Model string `json:"model"`
			}
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model == "" {
				http.Error(w, `{"error":"model is required"}`, http.StatusBadRequest)
				return
			}
			name = "show_" + strings.NewReplacer(":", "_", "/", "_").Replace(req.Model)
		case !ok || r.Method != http.MethodGet:
			http.NotFound(w, r)
			return
		}
		code, body, ctype := lookupAnswer(t, dir, name)
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(code)
		_, _ = w.Write(body)
	})
}

func lookupAnswer(t *testing.T, dir, name string) (code int, body []byte, ctype string) {
	matches, _ := filepath.Glob(filepath.Join(dir, name+".*"))
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), name+".")
		code := http.StatusOK
		if parts := strings.SplitN(rest, ".", 2); len(parts) == 2 {
			c, err := strconv.Atoi(parts[0])
			if err != nil {
				continue
			}
			code = c
		} else if strings.Contains(rest, ".") {
			continue
		}
		data, err := os.ReadFile(m)
		if err != nil {
			t.Error(err)
			return http.StatusInternalServerError, nil, "text/plain"
		}
		ctype := "application/json"
		if strings.HasSuffix(m, ".txt") {
			ctype = "text/plain; version=0.0.4; charset=utf-8"
		}
		return code, data, ctype
	}
	return http.StatusNotFound, []byte(`{"detail":"Not Found"}`), "application/json"
}

var goldenJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// marshalStatus renders a Status as stable, indented JSON: protojson varies
// its whitespace on purpose, so the text is re-indented by encoding/json.
func marshalStatus(t *testing.T, st Status) []byte {
	t.Helper()
	models := make([]json.RawMessage, 0, len(st.Models))
	for _, m := range st.Models {
		b, err := goldenJSON.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		models = append(models, b)
	}
	raw, err := json.Marshal(struct {
		Models []json.RawMessage `json:"models"`
	}{models})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

func checkGolden(t *testing.T, path string, st Status) {
	t.Helper()
	got := marshalStatus(t, st)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the tests with -update to write it)", err)
	}
	var golden struct {
		Models []json.RawMessage `json:"models"`
	}
	if err := json.Unmarshal(want, &golden); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	equal := len(golden.Models) == len(st.Models)
	for i := 0; equal && i < len(golden.Models); i++ {
		m := &switchyardv1.NodeModelStatus{}
		if err := protojson.Unmarshal(golden.Models[i], m); err != nil {
			t.Fatalf("%s: model %d: %v", path, i, err)
		}
		equal = proto.Equal(m, st.Models[i])
	}
	if !equal {
		t.Errorf("status differs from %s (run with -update if the change is intended)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
