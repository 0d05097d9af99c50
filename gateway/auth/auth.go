// Package auth knows the shape of Switchyard's API keys — syk_ (client),
// sya_ (admin) and syn_ (node), each <prefix><id>_<secret> — how to mint
// them, and how to check a presented secret against its stored SHA-256 in
// constant time. It holds no state.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"strings"
)

// Kind is the kind of key, named by its prefix.
type Kind string

const (
	Client Kind = "client"
	Admin  Kind = "admin"
	Node   Kind = "node"
)

// Prefix returns the key prefix of a kind: syk_, sya_ or syn_.
func (k Kind) Prefix() string {
	switch k {
	case Client:
		return "syk_"
	case Admin:
		return "sya_"
	case Node:
		return "syn_"
	}
	return ""
}

// ErrMalformed is returned for a string that is not a Switchyard key. Its
// message never repeats the string.
var ErrMalformed = errors.New("malformed API key")

const (
	idLen     = 12 // base32 characters: 60 bits, a lookup handle, not a secret
	secretLen = 32 // base32 characters: 160 random bits
)

var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Parsed is a key taken apart.
type Parsed struct {
	Kind   Kind
	ID     string
	Secret string
}

// Parse splits a presented key into kind, id and secret.
func Parse(key string) (Parsed, error) {
	var kind Kind
	switch {
	case strings.HasPrefix(key, "syk_"):
		kind = Client
	case strings.HasPrefix(key, "sya_"):
		kind = Admin
	case strings.HasPrefix(key, "syn_"):
		kind = Node
	default:
		return Parsed{}, ErrMalformed
	}
	rest := key[4:]
	if len(rest) != idLen+1+secretLen || rest[idLen] != '_' {
		return Parsed{}, ErrMalformed
	}
	id, secret := rest[:idLen], rest[idLen+1:]
	if !validChars(id) || !validChars(secret) {
		return Parsed{}, ErrMalformed
	}
	return Parsed{Kind: kind, ID: id, Secret: secret}, nil
}

func validChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// Minted is a new key: the plaintext to show once, and what to store.
type Minted struct {
	Plaintext  string
	ID         string
	SecretHash []byte
}

// Mint makes a new random key of the given kind.
func Mint(kind Kind) (Minted, error) {
	var idb [8]byte // 64 bits, 60 used: a lookup handle, not a secret
	var sb [20]byte // 160 bits: the secret
	if _, err := rand.Read(idb[:]); err != nil {
		return Minted{}, err
	}
	if _, err := rand.Read(sb[:]); err != nil {
		return Minted{}, err
	}
	id := enc.EncodeToString(idb[:])[:idLen]
	secret := enc.EncodeToString(sb[:])
	return Minted{
		Plaintext:  kind.Prefix() + id + "_" + secret,
		ID:         id,
		SecretHash: HashSecret(secret),
	}, nil
}

// HashSecret is what the store keeps of a secret.
func HashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Verify reports, in constant time, whether secret hashes to stored.
func Verify(stored []byte, secret string) bool {
	h := sha256.Sum256([]byte(secret))
	return len(stored) == len(h) && subtle.ConstantTimeCompare(stored, h[:]) == 1
}

// FromHeader takes the key out of an `Authorization: Bearer …` value, or
// returns "" when the value is not a bearer token.
func FromHeader(authorization string) string {
	const p = "bearer "
	if len(authorization) > len(p) && strings.EqualFold(authorization[:len(p)], p) {
		return strings.TrimSpace(authorization[len(p):])
	}
	return ""
}
