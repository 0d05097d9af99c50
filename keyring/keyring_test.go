package keyring

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestParseValid(t *testing.T) {
	raw1 := strings.TrimRight(testKey1, "=")
	tests := []struct {
		name         string
		keys         string
		primary      string
		wantVersions []uint32
		wantPrimary  uint32
	}{
		{"one key", "1:" + testKey1, "", []uint32{1}, 1},
		{"default primary is the highest", "1:" + testKey1 + ",2:" + testKey2, "", []uint32{1, 2}, 2},
		{"default primary ignores listing order", "7:" + testKey1 + ",3:" + testKey2 + ",5:" + testKey3, "", []uint32{3, 5, 7}, 7},
		{"explicit primary keeps a newer version decrypt-only", "1:" + testKey1 + ",2:" + testKey2, "1", []uint32{1, 2}, 1},
		{"explicit primary with spaces", "1:" + testKey1 + ",2:" + testKey2, " 2 ", []uint32{1, 2}, 2},
		{"spaces and newlines around entries", "  1:" + testKey1 + " ,\n 2 : " + testKey2 + "\n", "", []uint32{1, 2}, 2},
		{"unpadded base64", "1:" + raw1, "", []uint32{1}, 1},
		{"largest version", "4294967295:" + testKey1, "", []uint32{4294967295}, 4294967295},
		{"leading zeros are the same number", "0002:" + testKey1, "2", []uint32{2}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := Parse(tt.keys, tt.primary)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := k.Versions(); !slices.Equal(got, tt.wantVersions) {
				t.Errorf("Versions() = %v, want %v", got, tt.wantVersions)
			}
			if got := k.Primary(); got != tt.wantPrimary {
				t.Errorf("Primary() = %d, want %d", got, tt.wantPrimary)
			}
			for _, v := range tt.wantVersions {
				if !k.Has(v) {
					t.Errorf("Has(%d) = false", v)
				}
			}
			if k.Has(0) || k.Has(tt.wantVersions[len(tt.wantVersions)-1]+1) {
				t.Errorf("Has reports a version that is not listed")
			}
			sealed, err := k.Seal([]byte("x"), "t", "r", "c")
			if err != nil {
				t.Fatal(err)
			}
			if v, _ := k.Version(sealed); v != tt.wantPrimary {
				t.Errorf("sealed under version %d, want the primary %d", v, tt.wantPrimary)
			}
		})
	}
}

func TestVersionsReturnsACopy(t *testing.T) {
	k := mustParse(t, "1:"+testKey1+",2:"+testKey2, "")
	vs := k.Versions()
	vs[0] = 99
	if got := k.Versions(); !slices.Equal(got, []uint32{1, 2}) {
		t.Fatalf("changing the returned slice changed the keyring: %v", got)
	}
}

func TestParseMalformed(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	raw1, _ := base64.StdEncoding.DecodeString(k1)
	short := base64.StdEncoding.EncodeToString(raw1[:31])
	long := base64.StdEncoding.EncodeToString(append(raw1[:32:32], 0x42))
	// A key with one character outside the alphabet in the middle.
	badB64 := k1[:20] + "!" + k1[21:]
	// URL-safe base64 is not what the variable documents; testKey1 has a
	// '/', so its URL-safe form differs.
	fixed, _ := base64.StdEncoding.DecodeString(testKey1)
	urlSafe := base64.URLEncoding.EncodeToString(fixed)

	tests := []struct {
		name    string
		keys    string
		primary string
		want    []string // each must appear in the error
		lines   int      // number of problems reported
	}{
		{"empty", "", "", []string{"SWITCHYARD_ENCRYPTION_KEYS is empty"}, 1},
		{"only spaces", "  \t ", "", []string{"is empty"}, 1},
		{"bad base64", "1:" + badB64, "", []string{"entry 1 (version 1)", "not valid standard base64"}, 1},
		{"url-safe base64", "1:" + urlSafe + ",2:" + k2, "", []string{"entry 1 (version 1)", "not valid standard base64"}, 1},
		{"31 bytes", "1:" + short, "", []string{"entry 1 (version 1)", "decodes to 31 bytes, want 32"}, 1},
		{"33 bytes", "1:" + k2 + ",2:" + long, "", []string{"entry 2 (version 2)", "decodes to 33 bytes, want 32"}, 1},
		{"duplicate version", "1:" + k1 + ",1:" + k2, "", []string{"entry 2 (version 1)", "already listed by entry 1"}, 1},
		{"same key under two versions", "1:" + k1 + ",2:" + k1, "", []string{"entry 2 (version 2)", "same key as entry 1 (version 1)"}, 1},
		{"same key padded and raw", "1:" + k1 + ",2:" + strings.TrimRight(k1, "="), "", []string{"same key as entry 1"}, 1},
		{"version 0", "0:" + k1, "", []string{"entry 1: version is 0"}, 1},
		{"non-numeric version", "v1:" + k1, "", []string{"entry 1: version is not a positive integer"}, 1},
		{"negative version", "-1:" + k1, "", []string{"entry 1: version is not a positive integer"}, 1},
		{"version too large", "4294967296:" + k1, "", []string{"entry 1: version is larger than 4294967295"}, 1},
		{"missing version", ":" + k1, "", []string{"entry 1: version is missing"}, 1},
		{"missing key", "1:", "", []string{"entry 1 (version 1): key is empty"}, 1},
		{"no colon: a bare key", k1, "", []string{"entry 1 has no ':'"}, 1},
		{"key and version swapped", k1 + ":1", "", []string{"entry 1: version is not a positive integer", "entry 1: key is not valid standard base64"}, 2},
		{"stray comma", "1:" + k1 + ",,2:" + k2, "", []string{"entry 2 is empty"}, 1},
		{"trailing comma", "1:" + k1 + ",", "", []string{"entry 2 is empty"}, 1},
		{"primary not listed", "1:" + k1 + ",2:" + k2, "3", []string{"SWITCHYARD_ENCRYPTION_PRIMARY is 3", "does not list version 3 (it lists 1, 2)"}, 1},
		{"primary not a number", "1:" + k1, "two", []string{"SWITCHYARD_ENCRYPTION_PRIMARY is not a positive integer"}, 1},
		{"primary is a key pasted in the wrong place", "1:" + k1, k2, []string{"SWITCHYARD_ENCRYPTION_PRIMARY is not a positive integer"}, 1},
		{"primary 0", "1:" + k1, "0", []string{"SWITCHYARD_ENCRYPTION_PRIMARY is 0"}, 1},
		{"primary names a version whose key is bad", "1:" + k1 + ",2:" + short, "2", []string{"entry 2 (version 2): key decodes to 31 bytes"}, 1},
		{
			"every problem is reported",
			"0:" + k1 + ", 2:" + badB64 + ",2:" + k2 + "," + k2 + ",3:" + short, "9",
			[]string{"entry 1: version is 0", "entry 2 (version 2): key is not valid", "entry 3 (version 2): version 2 is already listed by entry 2",
				"entry 4 has no ':'", "entry 5 (version 3): key decodes to 31 bytes", "SWITCHYARD_ENCRYPTION_PRIMARY is 9"},
			6,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := Parse(tt.keys, tt.primary)
			if err == nil {
				t.Fatalf("Parse succeeded with %v", k)
			}
			if k != nil {
				t.Errorf("Parse returned a keyring with its error")
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not say %q:\n%s", w, msg)
				}
			}
			if got := strings.Count(msg, "\n") + 1; got != tt.lines {
				t.Errorf("error reports %d problems, want %d:\n%s", got, tt.lines, msg)
			}
			for _, line := range strings.Split(msg, "\n") {
				if !strings.HasPrefix(line, "keyring: ") {
					t.Errorf("problem %q does not say it comes from the keyring", line)
				}
			}
			assertNoKeyMaterial(t, msg, k1, k2, testKey1, badB64, urlSafe, short, long, strings.TrimRight(k1, "="))
		})
	}
}

func TestFromEnv(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	tests := []struct {
		name        string
		env         map[string]string
		wantErr     string
		wantPrimary uint32
	}{
		{"unset keys", map[string]string{}, "SWITCHYARD_ENCRYPTION_KEYS is required", 0},
		{"blank keys", map[string]string{EnvKeys: "  "}, "SWITCHYARD_ENCRYPTION_KEYS is required", 0},
		{"keys only", map[string]string{EnvKeys: "1:" + k1 + ",2:" + k2}, "", 2},
		{"keys and primary", map[string]string{EnvKeys: "1:" + k1 + ",2:" + k2, EnvPrimary: "1"}, "", 1},
		{"bad primary", map[string]string{EnvKeys: "1:" + k1, EnvPrimary: "2"}, "does not list version 2", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := FromEnv(func(name string) string { return tt.env[name] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("FromEnv error = %v, want one saying %q", err, tt.wantErr)
				}
				assertNoKeyMaterial(t, err.Error(), k1, k2)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.Primary() != tt.wantPrimary {
				t.Errorf("Primary() = %d, want %d", k.Primary(), tt.wantPrimary)
			}
		})
	}
}

func TestGenerate(t *testing.T) {
	seen := map[string]bool{}
	for i := range 3 {
		k, err := Generate()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := base64.StdEncoding.Strict().DecodeString(k)
		if err != nil || len(raw) != KeySize {
			t.Fatalf("Generate() = %q: not padded base64 of %d bytes (%d, %v)", k, KeySize, len(raw), err)
		}
		if seen[k] {
			t.Fatalf("Generate returned the same key twice")
		}
		seen[k] = true
		if _, err := Parse(fmt.Sprintf("%d:%s", i+1, k), ""); err != nil {
			t.Fatalf("Parse rejects a generated key: %v", err)
		}
	}
}

// TestPrintingLeaksNoKey is the canary for logs: however a keyring is
// printed or logged, none of its key material comes out.
func TestPrintingLeaksNoKey(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	k := mustParse(t, "1:"+k1+",2:"+k2, "")
	type config struct {
		Name    string
		Keyring *Keyring
		inline  Keyring // unexported, so fmt cannot call its methods
	}
	cfg := config{Name: "c", Keyring: k, inline: *k}

	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		outs = append(outs,
			fmt.Sprintf(verb, k),
			fmt.Sprintf(verb, *k),
			fmt.Sprintf(verb, cfg),
			fmt.Sprintf(verb, &cfg),
			fmt.Sprintf(verb, []any{k}),
		)
	}
	outs = append(outs, fmt.Sprint(k), fmt.Sprintln(*k), k.String(), k.GoString())

	var buf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&buf, nil), slog.NewTextHandler(&buf, nil)} {
		slog.New(h).Info("start", "keyring", k, "value", *k, "config", cfg)
	}
	outs = append(outs, buf.String())
	j, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(j))

	for _, out := range outs {
		assertNoKeyMaterial(t, out, k1, k2)
	}
	if got, want := fmt.Sprintf("%v", k), "keyring{versions:[1 2] primary:2}"; got != want {
		t.Errorf("%%v = %q, want %q", got, want)
	}
	if got := fmt.Sprintf("%+v", *k); got != "keyring{versions:[1 2] primary:2}" {
		t.Errorf("%%+v of the value = %q", got)
	}
	if !strings.Contains(buf.String(), "keyring{versions:[1 2] primary:2}") {
		t.Errorf("slog output does not describe the keyring: %s", buf.String())
	}
}

func TestZeroKeyring(t *testing.T) {
	for name, k := range map[string]*Keyring{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			if _, err := k.Seal([]byte("x"), "t", "r", "c"); err == nil {
				t.Error("Seal succeeded without keys")
			}
			if _, err := k.Open(vectors[0].sealed(t), vectors[0].table, vectors[0].row, vectors[0].column); errClass(err) != "unknown-version" {
				t.Errorf("Open error = %v, want *UnknownVersionError", err)
			}
			if k.Primary() != 0 || len(k.Versions()) != 0 || k.Has(1) {
				t.Error("an empty keyring reports keys")
			}
			_ = fmt.Sprintf("%v %+v %s", k, k, k) // must not panic
		})
	}
}
