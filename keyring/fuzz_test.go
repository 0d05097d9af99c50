package keyring

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary SWITCHYARD_ENCRYPTION_KEYS and _PRIMARY values
// to Parse. Properties:
//   - it never panics, and returns a keyring or an error, never both;
//   - the outcome does not depend on the content of the key text: swapping
//     base64 characters for others of the same validity gives the same
//     error message (so no message can quote key material) or an
//     equivalent keyring;
//   - a keyring it returns is consistent, and every version it lists opens
//     what it seals.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, keys, primary string) {
		k, err := Parse(keys, primary)
		twin, twinErr := Parse(scrambleKeyText(keys), primary)
		if err != nil {
			if k != nil {
				t.Fatal("Parse returned a keyring with its error")
			}
			if twinErr == nil || twinErr.Error() != err.Error() {
				t.Fatalf("the error depends on key text:\n%v\n-- vs --\n%v", err, twinErr)
			}
			return
		}
		if twinErr != nil {
			t.Fatalf("key text changed the outcome: %v", twinErr)
		}

		vs := k.Versions()
		if len(vs) == 0 || !k.Has(k.Primary()) {
			t.Fatalf("keyring %v has no usable primary", k)
		}
		if tv := twin.Versions(); len(tv) != len(vs) || twin.Primary() != k.Primary() {
			t.Fatalf("key text changed the keyring: %v vs %v", k, twin)
		}
		for i, v := range vs {
			if v == 0 || (i > 0 && vs[i-1] >= v) || !k.Has(v) {
				t.Fatalf("Versions() = %v: not positive, sorted and held", vs)
			}
		}
		if strings.TrimSpace(primary) == "" && k.Primary() != vs[len(vs)-1] {
			t.Fatalf("default primary %d is not the highest of %v", k.Primary(), vs)
		}
		// Bound the work per input: a long list would make each run slow
		// without exercising anything new.
		if len(vs) > 4 {
			vs = vs[:4]
		}
		for _, v := range vs {
			sealer, err := Parse(keys, strconv.FormatUint(uint64(v), 10))
			if err != nil {
				t.Fatalf("Parse with primary %d: %v", v, err)
			}
			sealed, err := sealer.Seal([]byte(primary), "t", "r", "c")
			if err != nil {
				t.Fatal(err)
			}
			got, err := k.Open(sealed, "t", "r", "c")
			if err != nil || string(got) != primary {
				t.Fatalf("version %d: Open = %q, %v", v, got, err)
			}
		}
	})
}

// scrambleKeyText swaps every base64 letter in the key text of each entry
// (after its first ':', or the whole entry when there is none) for another
// one that keeps the text exactly as valid: it flips the top two bits of
// each 6-bit value, so lengths, padding and the zero bits strict decoding
// checks are all unchanged, and equal keys stay equal.
func scrambleKeyText(keys string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	entries := strings.Split(keys, ",")
	for i, e := range entries {
		start := strings.IndexByte(e, ':') + 1 // 0 when there is no ':'
		b := []byte(e)
		for j := start; j < len(b); j++ {
			if n := strings.IndexByte(alphabet, b[j]); n >= 0 {
				b[j] = alphabet[n^0b110000]
			}
		}
		entries[i] = string(b)
	}
	return strings.Join(entries, ",")
}

// FuzzOpen feeds arbitrary bytes and bindings to Open. Properties: it never
// panics; it succeeds only for a genuine sealed value (one of the vectors,
// with its own binding and plaintext); every failure is one of the
// documented errors and carries no plaintext; ParseHeader, Version and
// Reseal agree with it; and sealing the input as plaintext round-trips.
func FuzzOpen(f *testing.F) {
	k := vectorKeyring(f)
	genuine := make(map[string]vector, len(vectors))
	for _, v := range vectors {
		genuine[string(v.sealed(f))] = v
	}
	f.Fuzz(func(t *testing.T, data []byte, table, row, column string) {
		got, err := k.Open(data, table, row, column)
		if err == nil {
			v, ok := genuine[string(data)]
			if !ok || v.table != table || v.row != row || v.column != column || string(got) != v.plaintext {
				t.Fatalf("Open accepted a value that was never sealed for %q/%q/%q: % x → %q", table, row, column, data, got)
			}
		} else {
			if got != nil {
				t.Fatalf("Open returned plaintext with error %v", err)
			}
			if errClass(err) == "" {
				t.Fatalf("Open error outside the contract: %v", err)
			}
		}

		h, herr := ParseHeader(data)
		v, verr := k.Version(data)
		if (herr == nil) != (verr == nil) || (herr == nil && v != h.Version) {
			t.Fatalf("ParseHeader = %+v, %v but Version = %d, %v", h, herr, v, verr)
		}
		if herr != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("ParseHeader refused (%v) but Open said %v", herr, err)
		}
		if herr == nil && (h.Format != FormatV1 || h.Version == 0) {
			t.Fatalf("ParseHeader accepted %+v", h)
		}
		var uv *UnknownVersionError
		if errors.As(err, &uv) && (herr != nil || uv.Version != h.Version || k.Has(uv.Version)) {
			t.Fatalf("UnknownVersionError{%d} for header %+v", uv.Version, h)
		}

		out, rerr := k.Reseal(data, table, row, column)
		switch {
		case herr != nil:
			if !errors.Is(rerr, ErrMalformed) {
				t.Fatalf("Reseal of a malformed value: %v", rerr)
			}
		case h.Version == k.Primary():
			if out != nil || rerr != nil {
				t.Fatalf("Reseal of a primary-version value = %x, %v; want nil, nil", out, rerr)
			}
		case err != nil:
			if out != nil || rerr == nil {
				t.Fatalf("Reseal made a value from one Open refuses (%v)", err)
			}
		default:
			back, err := k.Open(out, table, row, column)
			if rerr != nil || !bytes.Equal(back, got) {
				t.Fatalf("Reseal = %v; reopened %q, want %q (%v)", rerr, back, got, err)
			}
		}

		sealed, err := k.Seal(data, table, row, column)
		if err != nil {
			t.Fatal(err)
		}
		back, err := k.Open(sealed, table, row, column)
		if err != nil || !bytes.Equal(back, data) {
			t.Fatalf("round trip of %s: %q, %v", hex.EncodeToString(data), back, err)
		}
	})
}
