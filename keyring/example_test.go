package keyring_test

import (
	"errors"
	"fmt"

	"github.com/switchyard-ai/switchyard/keyring"
)

func Example() {
	k1, _ := keyring.Generate()
	k2, _ := keyring.Generate()
	env := map[string]string{
		keyring.EnvKeys: "1:" + k1 + ",2:" + k2,
	}
	k, err := keyring.FromEnv(func(name string) string { return env[name] })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(k) // versions only, never keys

	sealed, _ := k.Seal([]byte("sk-vendor-secret"), "vendors", "openai", "api_key_sealed")
	v, _ := k.Version(sealed)
	fmt.Println("sealed under version", v)

	plaintext, _ := k.Open(sealed, "vendors", "openai", "api_key_sealed")
	fmt.Println(string(plaintext))

	// The same bytes in another row do not open.
	_, err = k.Open(sealed, "vendors", "anthropic", "api_key_sealed")
	fmt.Println(errors.Is(err, keyring.ErrDecrypt))

	// Output:
	// keyring{versions:[1 2] primary:2}
	// sealed under version 2
	// sk-vendor-secret
	// true
}

func ExampleKeyring_Reseal() {
	k1, _ := keyring.Generate()
	k2, _ := keyring.Generate()
	old, _ := keyring.Parse("1:"+k1, "")
	sealed, _ := old.Seal([]byte("secret"), "vendors", "openai", "api_key_sealed")

	rotated, _ := keyring.Parse("1:"+k1+",2:"+k2, "")
	resealed, _ := rotated.Reseal(sealed, "vendors", "openai", "api_key_sealed")
	v, _ := rotated.Version(resealed)
	fmt.Println("now under version", v)

	again, err := rotated.Reseal(resealed, "vendors", "openai", "api_key_sealed")
	fmt.Println(again == nil, err) // nothing left to rewrite

	// Output:
	// now under version 2
	// true <nil>
}
