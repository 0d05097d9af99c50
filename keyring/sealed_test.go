package keyring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	k := mustParse(t, "1:"+newKey(t)+",2:"+newKey(t), "")
	tests := []struct {
		name               string
		plaintext          []byte
		table, row, column string
	}{
		{"vendor key", []byte("sk-proj-abcdef0123456789"), "vendors", "openai", "api_key_sealed"},
		{"node key", []byte("syn_anna-mac_s3cr3t"), "api_keys", "01HZX3", "secret_sealed"},
		{"empty plaintext", []byte{}, "vendors", "v", "api_key_sealed"},
		{"binary plaintext", []byte{0, 1, 2, 0xff, 0xfe, 0}, "t", "r", "c"},
		{"large plaintext", bytes.Repeat([]byte("0123456789abcdef"), 4096), "t", "r", "c"},
		{"empty binding", []byte("x"), "", "", ""},
		{"unicode binding", []byte("x"), "tàble", "行", "colonne"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sealed, err := k.Seal(tt.plaintext, tt.table, tt.row, tt.column)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(sealed), len(tt.plaintext)+Overhead; got != want {
				t.Errorf("sealed length %d, want %d", got, want)
			}
			if sealed[0] != FormatV1 || binary.BigEndian.Uint32(sealed[1:5]) != k.Primary() {
				t.Errorf("header % x, want format 01 and version %d", sealed[:5], k.Primary())
			}
			if len(tt.plaintext) >= 8 && bytes.Contains(sealed, tt.plaintext[:8]) {
				t.Errorf("sealed value contains the plaintext")
			}
			got, err := k.Open(sealed, tt.table, tt.row, tt.column)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.plaintext) {
				t.Errorf("Open = %q, want %q", got, tt.plaintext)
			}
			again, err := k.Seal(tt.plaintext, tt.table, tt.row, tt.column)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(again[HeaderSize:HeaderSize+nonceSize], sealed[HeaderSize:HeaderSize+nonceSize]) {
				t.Errorf("two seals used the same nonce")
			}
		})
	}
}

// TestGoldenVectors opens values sealed by an earlier build: the format is
// what databases hold, so it cannot drift.
func TestGoldenVectors(t *testing.T) {
	k := vectorKeyring(t)
	for _, v := range vectors {
		t.Run(v.table+"/"+v.row+"/"+v.column, func(t *testing.T) {
			got, err := k.Open(v.sealed(t), v.table, v.row, v.column)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != v.plaintext {
				t.Errorf("Open = %q, want %q", got, v.plaintext)
			}
		})
	}
}

func TestBinding(t *testing.T) {
	k := mustParse(t, "1:"+newKey(t), "")
	const table, row, column = "vendors", "openai", "api_key_sealed"
	sealed, err := k.Seal([]byte("sk-secret"), table, row, column)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name               string
		table, row, column string
	}{
		{"another table", "api_keys", row, column},
		{"another row", table, "anthropic", column},
		{"another column", table, row, "secret_sealed"},
		{"fields swapped", row, table, column},
		{"boundary moved between table and row", "vendorso", "penai", column},
		{"boundary moved between row and column", table, "openaia", "pi_key_sealed"},
		{"all empty", "", "", ""},
		{"case differs", "Vendors", row, column},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := k.Open(sealed, tt.table, tt.row, tt.column)
			if !errors.Is(err, ErrDecrypt) {
				t.Fatalf("Open error = %v, want ErrDecrypt", err)
			}
			if got != nil {
				t.Errorf("Open returned plaintext %q with its error", got)
			}
			if _, err := k.Reseal(sealed, tt.table, tt.row, tt.column); err != nil {
				// Under the primary, Reseal does not open: nothing to check.
				t.Fatalf("Reseal of a primary-version value = %v, want nil", err)
			}
		})
	}

	// The length prefixes are what keep concatenations apart.
	ab, err := k.Seal([]byte("x"), "ab", "c", "d")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Open(ab, "a", "bc", "d"); !errors.Is(err, ErrDecrypt) {
		t.Errorf(`("ab","c") opened as ("a","bc"): %v`, err)
	}
}

// TestEveryByteFlip changes each byte of a sealed value in several ways;
// none may open, and each error must be one the contract names.
func TestEveryByteFlip(t *testing.T) {
	k := mustParse(t, "1:"+newKey(t)+",2:"+newKey(t)+",3:"+newKey(t), "2")
	const table, row, column = "vendors", "openai", "api_key_sealed"
	sealed, err := k.Seal([]byte("sk-secret-value"), table, row, column)
	if err != nil {
		t.Fatal(err)
	}
	for _, mask := range []byte{0x01, 0x02, 0x80, 0xff} {
		t.Run(fmt.Sprintf("xor %#02x", mask), func(t *testing.T) {
			for i := range sealed {
				flipped := bytes.Clone(sealed)
				flipped[i] ^= mask
				got, err := k.Open(flipped, table, row, column)
				if err == nil || got != nil {
					t.Fatalf("byte %d ^ %#02x: Open = %q, %v; want an error and no plaintext", i, mask, got, err)
				}
				class := errClass(err)
				switch {
				case class == "":
					t.Errorf("byte %d: error outside the contract: %v", i, err)
				case i == 0 && class != "malformed":
					t.Errorf("format byte changed: %v, want ErrMalformed", err)
				case i >= HeaderSize && class != "decrypt":
					t.Errorf("byte %d: %v, want ErrDecrypt", i, err)
				}
				// Version bytes 1–4 may name version 0 (malformed), an
				// unknown version, or another held version (decrypt fails
				// because the header is bound): all three are refusals.
				// Reseal may answer nil, nil for a body it does not open
				// (its header says primary), but it must never hand back a
				// new value made from a changed one.
				if out, err := k.Reseal(flipped, table, row, column); out != nil {
					t.Errorf("byte %d: Reseal made a new value from a changed one (err %v)", i, err)
				}
			}
		})
	}
}

func TestTruncatedAndExtended(t *testing.T) {
	k := mustParse(t, "1:"+newKey(t), "")
	sealed, err := k.Seal([]byte("sk-secret-value"), "t", "r", "c")
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(sealed) {
		t.Run(fmt.Sprintf("first %d bytes", n), func(t *testing.T) {
			got, err := k.Open(sealed[:n], "t", "r", "c")
			if got != nil || err == nil {
				t.Fatalf("Open = %q, %v", got, err)
			}
			// Shorter than header+nonce+tag is structurally malformed; a
			// value cut inside its ciphertext still looks whole, and only
			// the tag can tell.
			want := ErrMalformed
			if n >= Overhead {
				want = ErrDecrypt
			}
			if !errors.Is(err, want) {
				t.Errorf("Open error = %v, want %v", err, want)
			}
		})
	}
	t.Run("one byte appended", func(t *testing.T) {
		if _, err := k.Open(append(bytes.Clone(sealed), 0), "t", "r", "c"); !errors.Is(err, ErrDecrypt) {
			t.Errorf("Open error = %v, want ErrDecrypt", err)
		}
	})
}

func TestUnknownVersion(t *testing.T) {
	kA, kB := newKey(t), newKey(t)
	newer := mustParse(t, "1:"+kA+",3:"+kB, "")
	older := mustParse(t, "1:"+kA, "")
	// The same key under another number: Open must not find it by trial.
	renumbered := mustParse(t, "2:"+kB, "")

	sealed, err := newer.Seal([]byte("secret"), "t", "r", "c")
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]*Keyring{"version not rolled out yet": older, "key held under another version": renumbered} {
		t.Run(name, func(t *testing.T) {
			for op, call := range map[string]func() ([]byte, error){
				"Open":   func() ([]byte, error) { return k.Open(sealed, "t", "r", "c") },
				"Reseal": func() ([]byte, error) { return k.Reseal(sealed, "t", "r", "c") },
			} {
				got, err := call()
				var uv *UnknownVersionError
				if !errors.As(err, &uv) {
					t.Fatalf("%s error = %v, want *UnknownVersionError", op, err)
				}
				if uv.Version != 3 || !strings.Contains(err.Error(), "version 3") {
					t.Errorf("%s error names version %d: %q", op, uv.Version, err)
				}
				if got != nil {
					t.Errorf("%s returned a value with its error", op)
				}
				assertNoKeyMaterial(t, err.Error(), kA, kB)
			}
		})
	}

	t.Run("same version number, different key", func(t *testing.T) {
		other := mustParse(t, "3:"+newKey(t), "")
		if _, err := other.Open(sealed, "t", "r", "c"); !errors.Is(err, ErrDecrypt) {
			t.Errorf("Open error = %v, want ErrDecrypt", err)
		}
	})
}

func TestParseHeader(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    Header
		wantErr bool
	}{
		{"nil", nil, Header{}, true},
		{"four bytes", []byte{1, 0, 0, 0}, Header{}, true},
		{"version 1", []byte{1, 0, 0, 0, 1}, Header{Format: FormatV1, Version: 1}, false},
		{"big-endian version", []byte{1, 0x01, 0x02, 0x03, 0x04, 0xaa}, Header{Format: FormatV1, Version: 0x01020304}, false},
		{"largest version", []byte{1, 0xff, 0xff, 0xff, 0xff}, Header{Format: FormatV1, Version: 0xffffffff}, false},
		{"version 0", []byte{1, 0, 0, 0, 0}, Header{}, true},
		{"format 0", []byte{0, 0, 0, 0, 1}, Header{}, true},
		{"format 2", []byte{2, 0, 0, 0, 1}, Header{}, true},
	}
	k := vectorKeyring(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHeader(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("ParseHeader error = %v, want ErrMalformed", err)
				}
				if _, err := k.Version(tt.in); !errors.Is(err, ErrMalformed) {
					t.Errorf("Version error = %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseHeader = %+v, %v; want %+v", got, err, tt.want)
			}
			// Version reports versions the keyring does not hold too:
			// rotation counts them.
			if v, err := k.Version(tt.in); err != nil || v != tt.want.Version {
				t.Errorf("Version = %d, %v; want %d", v, err, tt.want.Version)
			}
		})
	}
}

// TestRotation walks the documented procedure: roll a new version out
// decrypt-only, promote it, reseal, drop the old one.
func TestRotation(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	type row struct {
		id     string
		plain  string
		sealed []byte
	}
	rows := []row{{id: "a", plain: "sk-a"}, {id: "b", plain: "sk-b"}, {id: "c", plain: ""}}

	before := mustParse(t, "1:"+k1, "")
	for i := range rows {
		var err error
		if rows[i].sealed, err = before.Seal([]byte(rows[i].plain), "vendors", rows[i].id, "api_key_sealed"); err != nil {
			t.Fatal(err)
		}
	}

	rolledOut := mustParse(t, "1:"+k1+",2:"+k2, "1")
	promoted := mustParse(t, "1:"+k1+",2:"+k2, "")
	after := mustParse(t, "2:"+k2, "")

	t.Run("rolled out decrypt-only: still seals under 1", func(t *testing.T) {
		s, err := rolledOut.Seal([]byte("x"), "vendors", "z", "api_key_sealed")
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := rolledOut.Version(s); v != 1 {
			t.Errorf("sealed under %d, want 1", v)
		}
		// A replica still on the old keyring can read it.
		if _, err := before.Open(s, "vendors", "z", "api_key_sealed"); err != nil {
			t.Errorf("old replica cannot open a value from a rolled-out one: %v", err)
		}
	})

	t.Run("promoted: old values open, reseal moves them to 2", func(t *testing.T) {
		for i, r := range rows {
			got, err := promoted.Open(r.sealed, "vendors", r.id, "api_key_sealed")
			if err != nil || string(got) != r.plain {
				t.Fatalf("row %s: Open = %q, %v", r.id, got, err)
			}
			resealed, err := promoted.Reseal(r.sealed, "vendors", r.id, "api_key_sealed")
			if err != nil || resealed == nil {
				t.Fatalf("row %s: Reseal = %v, %v; want a new value", r.id, resealed, err)
			}
			if v, _ := promoted.Version(resealed); v != 2 {
				t.Errorf("row %s: resealed under %d, want 2", r.id, v)
			}
			again, err := promoted.Reseal(resealed, "vendors", r.id, "api_key_sealed")
			if err != nil || again != nil {
				t.Errorf("row %s: second Reseal = %v, %v; want nil, nil", r.id, again, err)
			}
			rows[i].sealed = resealed
		}
	})

	t.Run("old version dropped: resealed values still open", func(t *testing.T) {
		for _, r := range rows {
			got, err := after.Open(r.sealed, "vendors", r.id, "api_key_sealed")
			if err != nil || string(got) != r.plain {
				t.Errorf("row %s: Open = %q, %v", r.id, got, err)
			}
		}
	})

	t.Run("reseal keeps the binding", func(t *testing.T) {
		if _, err := after.Open(rows[0].sealed, "vendors", rows[1].id, "api_key_sealed"); !errors.Is(err, ErrDecrypt) {
			t.Errorf("resealed value opened under another row: %v", err)
		}
	})

	t.Run("reseal of a malformed value", func(t *testing.T) {
		if _, err := promoted.Reseal([]byte{1, 0}, "vendors", "a", "api_key_sealed"); !errors.Is(err, ErrMalformed) {
			t.Errorf("Reseal error = %v, want ErrMalformed", err)
		}
	})
}

func TestConcurrentUse(t *testing.T) {
	k := mustParse(t, "1:"+newKey(t)+",2:"+newKey(t), "")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				row := fmt.Sprintf("%d-%d", g, i)
				s, err := k.Seal([]byte(row), "t", row, "c")
				if err == nil {
					var got []byte
					got, err = k.Open(s, "t", row, "c")
					if err == nil && string(got) != row {
						err = fmt.Errorf("row %s opened as %q", row, got)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func BenchmarkSeal(b *testing.B) {
	k := mustParse(b, "1:"+newKey(b), "")
	for _, size := range []int{64, 1024, 16 << 10} {
		plaintext := bytes.Repeat([]byte{'k'}, size)
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := k.Seal(plaintext, "vendors", "openai", "api_key_sealed"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	k := mustParse(b, "1:"+newKey(b), "")
	for _, size := range []int{64, 1024, 16 << 10} {
		sealed, err := k.Seal(bytes.Repeat([]byte{'k'}, size), "vendors", "openai", "api_key_sealed")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := k.Open(sealed, "vendors", "openai", "api_key_sealed"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
