// Package keyring seals the secrets Switchyard keeps in its database (vendor
// API keys, node keys) with AES-256-GCM under versioned keys taken from the
// environment, so that the database alone never reveals them.
//
// A Keyring holds every version listed in SWITCHYARD_ENCRYPTION_KEYS. The
// primary version (the highest, unless SWITCHYARD_ENCRYPTION_PRIMARY names
// another) seals; every listed version opens. That split is what makes
// rotation safe across replicas: a new version is first rolled out
// open-only, then promoted, so no replica meets a value it cannot read.
//
// A sealed value records its format and key version in a 5-byte header and
// is bound, through the GCM additional data, to that header and to the
// table, row and column it is stored in. A value copied elsewhere, or with
// any byte changed, fails to open; it never yields wrong plaintext.
//
// Key material never appears in an error, in fmt output or in a log line
// built from a Keyring.
package keyring

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The environment variables FromEnv reads.
const (
	EnvKeys    = "SWITCHYARD_ENCRYPTION_KEYS"
	EnvPrimary = "SWITCHYARD_ENCRYPTION_PRIMARY"
)

// KeySize is the length in bytes of every key: AES-256.
const KeySize = 32

// Keyring is an immutable set of versioned keys with one primary version.
// It is safe for concurrent use. Build one with Parse or FromEnv; the zero
// Keyring holds no keys, so it seals nothing and opens nothing.
type Keyring struct {
	// Only the AEADs are kept, not the raw key bytes, so there is one less
	// copy of the key in memory to leak.
	aeads    map[uint32]cipher.AEAD
	versions []uint32 // sorted ascending
	primary  uint32
}

// FromEnv builds the keyring from SWITCHYARD_ENCRYPTION_KEYS and
// SWITCHYARD_ENCRYPTION_PRIMARY as getenv reports them (os.Getenv in
// production; a map lookup in tests, so they need not touch the process
// environment).
func FromEnv(getenv func(string) string) (*Keyring, error) {
	keys := getenv(EnvKeys)
	if strings.TrimSpace(keys) == "" {
		return nil, errors.New("keyring: " + EnvKeys + " is required: a comma-separated list of version:key, " +
			"each key 32 random bytes in base64 (`switchyard keygen` prints one)")
	}
	return Parse(keys, getenv(EnvPrimary))
}

// Parse builds a keyring from the value of SWITCHYARD_ENCRYPTION_KEYS,
// "1:<base64>,2:<base64>", and of SWITCHYARD_ENCRYPTION_PRIMARY ("" for the
// highest version). Every problem found is reported, joined with
// errors.Join, so an operator fixes them all in one go; no message contains
// key material, because start-up errors end up in logs.
func Parse(keys, primary string) (*Keyring, error) {
	var errs []error
	if strings.TrimSpace(keys) == "" {
		errs = append(errs, errors.New("keyring: "+EnvKeys+" is empty"))
	}

	k := &Keyring{aeads: make(map[uint32]cipher.AEAD)}
	// Versions whose number parsed, even when their key did not: checking
	// the primary against them avoids a misleading "not listed" when the
	// real problem is the key's text.
	listed := make(map[uint32]int) // version → entry position
	var keyOf []keyEntry           // decoded keys, only to spot a key listed twice
	if len(errs) == 0 {
		for i, entry := range strings.Split(keys, ",") {
			pos := i + 1
			v, key, entryErrs := parseEntry(pos, entry)
			errs = append(errs, entryErrs...)
			if v == 0 {
				continue
			}
			if first, dup := listed[v]; dup {
				errs = append(errs, fmt.Errorf("keyring: %s entry %d (version %d): version %d is already listed by entry %d",
					EnvKeys, pos, v, v, first))
				continue
			}
			listed[v] = pos
			if key == nil {
				continue
			}
			for _, other := range keyOf {
				// Two versions with one key would make a rotation that
				// changes nothing while looking done.
				if subtle.ConstantTimeCompare(other.key, key) == 1 {
					errs = append(errs, fmt.Errorf("keyring: %s entry %d (version %d): same key as entry %d (version %d); every version needs its own key",
						EnvKeys, pos, v, other.pos, other.version))
				}
			}
			keyOf = append(keyOf, keyEntry{pos: pos, version: v, key: key})
			aead, err := newAEAD(key)
			if err != nil {
				// Unreachable with a 32-byte key; reported without the
				// cause in case a cause ever quotes its input.
				errs = append(errs, fmt.Errorf("keyring: %s entry %d (version %d): cannot build AES-256-GCM", EnvKeys, pos, v))
				continue
			}
			k.aeads[v] = aead
			k.versions = append(k.versions, v)
		}
	}
	slices.Sort(k.versions)

	switch p := strings.TrimSpace(primary); {
	case p == "":
		if len(k.versions) > 0 {
			k.primary = k.versions[len(k.versions)-1]
		}
	default:
		v, err := parseVersion(p)
		if err != nil {
			// The text is not echoed: a key pasted into the wrong variable
			// must not reach the log.
			errs = append(errs, fmt.Errorf("keyring: %s %s", EnvPrimary, err))
			break
		}
		if _, ok := listed[v]; !ok && len(listed) > 0 {
			errs = append(errs, fmt.Errorf("keyring: %s is %d, but %s does not list version %d (it lists %s)",
				EnvPrimary, v, EnvKeys, v, formatVersions(sortedKeys(listed))))
			break
		}
		k.primary = v
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return k, nil
}

type keyEntry struct {
	pos     int
	version uint32
	key     []byte
}

// parseEntry parses one "version:base64" entry. It returns the version when
// its number is valid (0 otherwise) and the key when that is valid too.
// Messages quote the version only once it parsed as a number, and never the
// key text or a part of it.
func parseEntry(pos int, entry string) (uint32, []byte, []error) {
	entry = strings.TrimSpace(entry)
	if entry == "" {
		return 0, nil, []error{fmt.Errorf("keyring: %s entry %d is empty (stray comma?)", EnvKeys, pos)}
	}
	vText, kText, ok := strings.Cut(entry, ":")
	if !ok {
		return 0, nil, []error{fmt.Errorf("keyring: %s entry %d has no ':' between version and key (want version:base64)", EnvKeys, pos)}
	}
	var errs []error
	v, err := parseVersion(strings.TrimSpace(vText))
	where := fmt.Sprintf("entry %d (version %d)", pos, v)
	if err != nil {
		errs = append(errs, fmt.Errorf("keyring: %s entry %d: version %s", EnvKeys, pos, err))
		where = fmt.Sprintf("entry %d", pos)
	}
	key, err := decodeKey(strings.TrimSpace(kText))
	if err != nil {
		errs = append(errs, fmt.Errorf("keyring: %s %s: %w", EnvKeys, where, err))
		key = nil
	}
	return v, key, errs
}

// parseVersion parses a key version: a positive integer that fits uint32,
// in plain decimal digits. Errors describe the problem without quoting s.
func parseVersion(s string) (uint32, error) {
	if s == "" {
		return 0, errors.New("is missing (want a positive integer)")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("is not a positive integer")
		}
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("is larger than %d", uint32(math.MaxUint32))
	}
	if n == 0 {
		return 0, errors.New("is 0; versions start at 1")
	}
	return uint32(n), nil
}

// decodeKey decodes standard base64, padded or not, into a 32-byte key. Its
// errors never carry the decoder's own error, which is not needed to act on
// and which we do not want to audit for what it quotes.
func decodeKey(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("key is empty")
	}
	enc := base64.RawStdEncoding.Strict()
	if strings.HasSuffix(s, "=") {
		enc = base64.StdEncoding.Strict()
	}
	key, err := enc.DecodeString(s)
	if err != nil {
		return nil, errors.New("key is not valid standard base64")
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("key decodes to %d bytes, want %d (AES-256)", len(key), KeySize)
	}
	return key, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	// The random-nonce GCM draws the 96-bit nonce itself and writes it in
	// front of the ciphertext, which is exactly the sealed layout after our
	// header; callers cannot get nonce handling wrong.
	return cipher.NewGCMWithRandomNonce(block)
}

// Generate returns a new key for SWITCHYARD_ENCRYPTION_KEYS: 32 random bytes
// in padded standard base64. It is what `switchyard keygen` prints.
func Generate() (string, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("keyring: reading random bytes: %w", err)
	}
	return base64.StdEncoding.EncodeToString(key), nil
}

// Primary returns the version Seal uses.
func (k *Keyring) Primary() uint32 {
	if k == nil {
		return 0
	}
	return k.primary
}

// Versions returns every version the keyring opens, ascending.
func (k *Keyring) Versions() []uint32 {
	if k == nil {
		return nil
	}
	return slices.Clone(k.versions)
}

// Has reports whether the keyring holds version v.
func (k *Keyring) Has(v uint32) bool {
	if k == nil {
		return false
	}
	_, ok := k.aeads[v]
	return ok
}

// String describes the keyring by its versions only.
//
// String, GoString, Format and LogValue have value receivers so that a
// dereferenced Keyring printed with %v or %#v is covered as well as a
// pointer: without them fmt would walk the struct into the ciphers.
func (k Keyring) String() string {
	return fmt.Sprintf("keyring{versions:%v primary:%d}", k.versions, k.primary)
}

// GoString is String: %#v must not dump the ciphers either.
func (k Keyring) GoString() string { return k.String() }

// Format prints String for every verb and flag.
func (k Keyring) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// LogValue keeps slog handlers from reflecting over the keyring.
func (k Keyring) LogValue() slog.Value { return slog.StringValue(k.String()) }

// Interface guards: printing or logging a keyring goes through our methods.
var (
	_ fmt.Stringer   = Keyring{}
	_ fmt.GoStringer = Keyring{}
	_ fmt.Formatter  = Keyring{}
	_ slog.LogValuer = Keyring{}
)

func sortedKeys(m map[uint32]int) []uint32 {
	out := make([]uint32, 0, len(m))
	for v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

func formatVersions(vs []uint32) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.FormatUint(uint64(v), 10)
	}
	return strings.Join(parts, ", ")
}
