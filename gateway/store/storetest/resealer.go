package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// Undecryptable, inside a payload, makes Resealer fail on that value, as a
// keyring fails on a value sealed under a version it does not hold.
const Undecryptable = "undecryptable"

// Seal makes a fake sealed value, "v<version>:<payload>", for Resealer.
func Seal(version uint32, payload string) []byte {
	return []byte("v" + strconv.FormatUint(uint64(version), 10) + ":" + payload)
}

// Resealer is a fake store.Resealer over Seal's format: it rewrites values
// under Primary, leaves values already there (nil), and fails on payloads
// that contain Undecryptable. Its zero value reseals everything under
// version 0.
type Resealer struct {
	Primary uint32
	// Hook, when set, runs at the start of every Reseal, inside the store's
	// transaction: tests use it to see the refs, or to hold the locks.
	Hook func(ref store.SealedRef)
}

var _ store.Resealer = Resealer{}

func parse(sealed []byte) (uint32, string, error) {
	s := string(sealed)
	head, payload, ok := strings.Cut(s, ":")
	if !ok || !strings.HasPrefix(head, "v") {
		return 0, "", errors.New("not a sealed value")
	}
	v, err := strconv.ParseUint(head[1:], 10, 32)
	if err != nil {
		return 0, "", errors.New("not a sealed value: bad version")
	}
	return uint32(v), payload, nil
}

// Version reads the version Seal recorded.
func (r Resealer) Version(sealed []byte) (uint32, error) {
	v, _, err := parse(sealed)
	return v, err
}

// Reseal returns the value under Primary, nil when it already is, or an
// error naming the ref (never the value) when it cannot be read.
func (r Resealer) Reseal(ref store.SealedRef, sealed []byte) ([]byte, error) {
	if r.Hook != nil {
		r.Hook(ref)
	}
	v, payload, err := parse(sealed)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if strings.Contains(payload, Undecryptable) {
		return nil, fmt.Errorf("%s: key version %d cannot decrypt it", ref, v)
	}
	if v == r.Primary {
		return nil, nil
	}
	return Seal(r.Primary, payload), nil
}
