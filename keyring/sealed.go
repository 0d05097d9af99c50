package keyring

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The sealed layout, format 1:
//
//	byte 0       format (FormatV1)
//	bytes 1–4    key version, uint32 big-endian
//	bytes 5–16   random 96-bit nonce
//	bytes 17–    AES-256-GCM ciphertext followed by its 16-byte tag
//
// The additional data is the 5-byte header, then table, row and column,
// each preceded by its length as a uint32 big-endian. Binding the header
// means a changed version or format byte fails authentication rather than
// being trusted; the length prefixes keep ("ab","c") and ("a","bc") apart.
const (
	// FormatV1 is the format byte of values sealed by this package.
	FormatV1 byte = 0x01
	// HeaderSize is the length of the format byte and key version.
	HeaderSize = 5
	// Overhead is how much longer a sealed value is than its plaintext:
	// header, nonce and tag.
	Overhead = HeaderSize + nonceSize + tagSize

	nonceSize = 12
	tagSize   = 16
)

var (
	// ErrMalformed means the bytes are not a sealed value this package can
	// read: too short, or an unknown format byte.
	ErrMalformed = errors.New("keyring: malformed sealed value")
	// ErrDecrypt means the value failed authentication: it was changed,
	// sealed under another key with the same version number, or bound to
	// another table, row or column.
	ErrDecrypt = errors.New("keyring: sealed value failed authentication")
)

// UnknownVersionError is returned for a value sealed under a version the
// keyring does not hold. Open does not fall back to trying other keys: the
// header says which key to use, and a missing key is a deployment problem
// to report, not to guess around.
type UnknownVersionError struct {
	Version uint32
}

func (e *UnknownVersionError) Error() string {
	return fmt.Sprintf("keyring: sealed under key version %d, which this keyring does not hold (add it to %s)",
		e.Version, EnvKeys)
}

// Header is the readable part of a sealed value.
type Header struct {
	Format  byte
	Version uint32
}

// ParseHeader reads the format and key version of a sealed value without
// opening it. Version 0 is never written, so it is reported as malformed.
func ParseHeader(sealed []byte) (Header, error) {
	if len(sealed) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrMalformed, len(sealed), HeaderSize)
	}
	h := Header{Format: sealed[0], Version: binary.BigEndian.Uint32(sealed[1:HeaderSize])}
	if h.Format != FormatV1 {
		return Header{}, fmt.Errorf("%w: unknown format 0x%02x", ErrMalformed, h.Format)
	}
	if h.Version == 0 {
		return Header{}, fmt.Errorf("%w: key version 0", ErrMalformed)
	}
	return h, nil
}

// Version returns the key version a sealed value records, whether or not
// this keyring holds it, so rotation can count values per version.
func (k *Keyring) Version(sealed []byte) (uint32, error) {
	h, err := ParseHeader(sealed)
	if err != nil {
		return 0, err
	}
	return h.Version, nil
}

// Seal encrypts plaintext under the primary version, bound to the table,
// row and column it will be stored in. Each call draws a fresh nonce, so
// sealing the same plaintext twice gives different values.
func (k *Keyring) Seal(plaintext []byte, table, row, column string) ([]byte, error) {
	if k == nil || len(k.aeads) == 0 {
		return nil, errors.New("keyring: cannot seal: the keyring holds no keys")
	}
	aead, ok := k.aeads[k.primary]
	if !ok {
		// Parse never builds such a keyring; this guards a hand-made one.
		return nil, &UnknownVersionError{Version: k.primary}
	}
	out := make([]byte, HeaderSize, Overhead+len(plaintext))
	out[0] = FormatV1
	binary.BigEndian.PutUint32(out[1:HeaderSize], k.primary)
	ad, err := additionalData(out[:HeaderSize], table, row, column)
	if err != nil {
		return nil, err
	}
	// The random-nonce AEAD appends nonce || ciphertext || tag after the
	// header, which is the whole layout.
	return aead.Seal(out, nil, plaintext, ad), nil
}

// Open decrypts a value sealed by Seal with the same table, row and column.
// Errors: ErrMalformed, *UnknownVersionError or ErrDecrypt (use errors.Is
// and errors.As); on error no plaintext is returned.
func (k *Keyring) Open(sealed []byte, table, row, column string) ([]byte, error) {
	h, err := ParseHeader(sealed)
	if err != nil {
		return nil, err
	}
	if len(sealed) < Overhead {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d bytes of header, nonce and tag",
			ErrMalformed, len(sealed), Overhead)
	}
	var aead cipher.AEAD
	if k != nil {
		aead = k.aeads[h.Version]
	}
	if aead == nil {
		return nil, &UnknownVersionError{Version: h.Version}
	}
	ad, err := additionalData(sealed[:HeaderSize], table, row, column)
	if err != nil {
		return nil, err
	}
	plaintext, err := aead.Open(nil, nil, sealed[HeaderSize:], ad)
	if err != nil {
		// GCM's own error says nothing more than "authentication failed".
		return nil, ErrDecrypt
	}
	if plaintext == nil {
		// An empty secret is still a value, not an absent one.
		plaintext = []byte{}
	}
	return plaintext, nil
}

// Reseal returns the value sealed under the primary version, or nil, nil
// when it already is, so a rotation rewrites only what it must and a second
// rotation writes nothing. A value under the primary version is not opened:
// rotation is about versions, and opening every row would make it cost as
// much as the number of rows however few need rewriting.
func (k *Keyring) Reseal(sealed []byte, table, row, column string) ([]byte, error) {
	h, err := ParseHeader(sealed)
	if err != nil {
		return nil, err
	}
	if h.Version == k.Primary() {
		return nil, nil
	}
	plaintext, err := k.Open(sealed, table, row, column)
	if err != nil {
		return nil, err
	}
	defer clear(plaintext)
	return k.Seal(plaintext, table, row, column)
}

// additionalData binds a value to its header and to where it is stored.
func additionalData(header []byte, table, row, column string) ([]byte, error) {
	parts := [...]string{table, row, column}
	n := len(header)
	for _, p := range parts {
		if uint64(len(p)) > math.MaxUint32 {
			return nil, errors.New("keyring: table, row or column name longer than 4 GiB")
		}
		n += 4 + len(p)
	}
	ad := make([]byte, 0, n)
	ad = append(ad, header...)
	for _, p := range parts {
		ad = binary.BigEndian.AppendUint32(ad, uint32(len(p)))
		ad = append(ad, p...)
	}
	return ad, nil
}
