package keyring

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// Fixed test keys: the golden vectors and the committed fuzz corpus were
// sealed under them, so they must never change.
const (
	testKey1 = "SjU9D2yenKP5u/DhCFcXhlb2y8MOmd5P8WdI/eTXUZ8="
	testKey2 = "3VrvYt6sTdYiEnrJDLMf4XTLFPCtE9I0u+54PXXRZRU="
	testKey3 = "dvlWOCEsYdEDNcEqeT86HDeikMoJK0IoQLs8lQ50KtQ="
)

// vector is a genuine sealed value made by this package under testKey1 as
// version 1 and testKey2 as version 2. They pin the format: a change that
// stops these opening would strand every value already in a database.
type vector struct {
	sealedHex, table, row, column, plaintext string
}

var vectors = []vector{
	{"0100000001e4a2d1be21c5ac53091a1a6ec4d665c8cdb6fc9c5d70de35a729a01dfd239ad57421bb97f9ff19bc32bc2d624140", "vendors", "openai", "api_key_sealed", "sk-test-vendor-key"},
	{"01000000027f82a7acc52fdca4aae37de22ac48dea108f3fb85f7d68e39b30c36c7cee998cd8cab59d7fa89a27f167c9e4d2403252b357b47db1d1abc555", "api_keys", "k_42", "secret_sealed", "syn_anna-mac_0123456789abcdef"},
	{"01000000027154d509f931b670134a53dc75854bf8427df3308736a033b9798544", "vendors", "empty", "api_key_sealed", ""},
}

func (v vector) sealed(t testing.TB) []byte {
	t.Helper()
	b, err := hex.DecodeString(v.sealedHex)
	if err != nil {
		t.Fatalf("bad vector hex: %v", err)
	}
	return b
}

// vectorKeyring holds the keys the vectors were sealed under.
func vectorKeyring(t testing.TB) *Keyring {
	t.Helper()
	return mustParse(t, "1:"+testKey1+",2:"+testKey2, "")
}

func mustParse(t testing.TB, keys, primary string) *Keyring {
	t.Helper()
	k, err := Parse(keys, primary)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", keys, primary, err)
	}
	return k
}

func newKey(t testing.TB) string {
	t.Helper()
	k, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// assertNoKeyMaterial fails when text contains any of the keys' base64
// text, any 8-character run of it, or the decoded bytes in raw, hex or
// base64 form.
func assertNoKeyMaterial(t testing.TB, text string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if k == "" {
			continue
		}
		if strings.Contains(text, k) {
			t.Errorf("output contains a whole key: %q", text)
			continue
		}
		for i := 0; i+8 <= len(k); i++ {
			if run := k[i : i+8]; strings.Contains(text, run) {
				t.Errorf("output contains %q, an 8-character run of a key: %q", run, text)
				break
			}
		}
		raw, err := base64.StdEncoding.DecodeString(k)
		if err != nil || len(raw) < 8 {
			continue
		}
		for _, form := range []string{string(raw[:8]), hex.EncodeToString(raw[:8]), strings.ToUpper(hex.EncodeToString(raw[:8]))} {
			if strings.Contains(text, form) {
				t.Errorf("output contains a key's bytes (%q): %q", form, text)
			}
		}
	}
}

// errClass names which documented error an Open or Reseal error is, or ""
// for an error outside the contract.
func errClass(err error) string {
	var uv *UnknownVersionError
	switch {
	case errors.Is(err, ErrMalformed):
		return "malformed"
	case errors.Is(err, ErrDecrypt):
		return "decrypt"
	case errors.As(err, &uv):
		return "unknown-version"
	}
	return ""
}
