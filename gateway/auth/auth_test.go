package auth

import (
	"strings"
	"testing"
)

func TestMintAndParse(t *testing.T) {
	for _, k := range []Kind{Client, Admin, Node} {
		m, err := Mint(k)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(m.Plaintext, k.Prefix()) {
			t.Fatalf("%s key %q", k, m.Plaintext)
		}
		p, err := Parse(m.Plaintext)
		if err != nil || p.Kind != k || p.ID != m.ID {
			t.Fatalf("Parse = %+v, %v", p, err)
		}
		if !Verify(m.SecretHash, p.Secret) || Verify(m.SecretHash, p.Secret[1:]+"a") {
			t.Fatal("Verify is wrong")
		}
		if strings.Contains(string(m.SecretHash), p.Secret) {
			t.Fatal("the hash holds the secret")
		}
	}
	for _, bad := range []string{"", "syk_", "syx_aaaaaaaaaaaa_" + strings.Repeat("a", 32), "syk_aaaaaaaaaaaa-" + strings.Repeat("a", 32),
		"syk_aaaaaaaaaaa_" + strings.Repeat("a", 33), "syk_AAAAAAAAAAAA_" + strings.Repeat("a", 32), "syk_aaaaaaaaaaaa_" + strings.Repeat("1", 32)} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		} else if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("the error repeats the key")
		}
	}
	if FromHeader("Bearer abc") != "abc" || FromHeader("bearer  abc ") != "abc" || FromHeader("Basic abc") != "" {
		t.Fatal("FromHeader")
	}
}
