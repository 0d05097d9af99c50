package admin_test

import (
	"context"
	"testing"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/internal/testenv"
	"github.com/switchyard-ai/switchyard/keyring"
)

// TestRotateEncryption follows SPEC §7's procedure across two keyring
// generations on one database.
func TestRotateEncryption(t *testing.T) {
	url := testenv.Postgres(t)
	st := openStore(t, url)
	k1 := keySpec(t, 1)
	old := newEnvWith(t, st, newKeyring(t, k1))
	ctx := withKey(bootstrapKey)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := old.admin.UpsertVendor(ctx, &pb.UpsertVendorRequest{Vendor: &pb.Vendor{Id: id, BaseUrl: "https://" + id + ".example.com/v1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := old.admin.SetVendorKey(ctx, &pb.SetVendorKeyRequest{VendorId: id, ApiKey: "sk-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	nk, err := old.admin.MintNodeKey(ctx, &pb.MintNodeKeyRequest{NodeId: "n1"})
	if err != nil {
		t.Fatal(err)
	}

	// Step 1: version 2 added; step 2: promoted and RotateEncryption called.
	k12 := k1 + "," + keySpec(t, 2)
	kr := newKeyring(t, k12)
	e := newEnvWith(t, st, kr)

	dry, err := e.admin.RotateEncryption(ctx, &pb.RotateEncryptionRequest{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.GetRewritten() != 4 || dry.GetRowsPerVersion()[1] != 4 || dry.GetRowsPerVersion()[2] != 0 || dry.GetPrimaryVersion() != 2 {
		t.Fatalf("dry run = %v", dry)
	}
	v, _ := e.store.GetVendor(context.Background(), "a")
	if ver, _ := kr.Version(v.KeySealed); ver != 1 {
		t.Fatalf("dry run rewrote a value (version %d)", ver)
	}

	rot, err := e.admin.RotateEncryption(ctx, &pb.RotateEncryptionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if rot.GetRewritten() != 4 || rot.GetRowsPerVersion()[2] != 4 || rot.GetRowsPerVersion()[1] != 0 || len(rot.GetFailed()) != 0 {
		t.Fatalf("rotate = %v", rot)
	}
	again, err := e.admin.RotateEncryption(ctx, &pb.RotateEncryptionRequest{})
	if err != nil || again.GetRewritten() != 0 {
		t.Fatalf("second rotate = %v, %v", again, err)
	}

	// Step 3: version 1 dropped; every value still opens.
	only2, err := keyring.Parse(k12[len(k1)+1:], "")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		v, err := e.store.GetVendor(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if v.KeyVersion != 2 {
			t.Errorf("vendor %s key_version = %d", id, v.KeyVersion)
		}
		p, err := only2.Open(v.KeySealed, "vendors", id, "api_key_sealed")
		if err != nil || string(p) != "sk-"+id {
			t.Fatalf("vendor %s opens to %q, %v", id, p, err)
		}
	}
	k, err := e.store.NodeKey(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := only2.Open(k.Sealed, "api_keys", k.ID, "secret_sealed"); err != nil || string(p) != nk.GetApiKey() {
		t.Fatalf("node key does not open after rotation: %v", err)
	}
}

// TestRotateEncryptionWritesNothingOnFailure: one value sealed under a
// version this replica does not hold → the RPC names it and writes nothing.
func TestRotateEncryptionWritesNothingOnFailure(t *testing.T) {
	st := openStore(t, testenv.Postgres(t))
	spec := keySpec(t, 1, 2)
	kr := newKeyring(t, spec)
	e := newEnvWith(t, st, kr)
	ctx := withKey(bootstrapKey)
	for _, id := range []string{"good", "bad"} {
		if _, err := e.admin.UpsertVendor(ctx, &pb.UpsertVendorRequest{Vendor: &pb.Vendor{Id: id, BaseUrl: "https://example.com/v1"}}); err != nil {
			t.Fatal(err)
		}
	}
	// "good" under version 1 (an older primary), "bad" under version 9.
	asV1, err := keyring.Parse(spec, "1")
	if err != nil {
		t.Fatal(err)
	}
	stranger := newKeyring(t, keySpec(t, 9))
	bad, _ := stranger.Seal([]byte("sk-bad"), "vendors", "bad", "api_key_sealed")
	if _, err := st.SetVendorKey(context.Background(), store.Actor{KeyID: "test"}, "bad", bad, 9); err != nil {
		t.Fatal(err)
	}
	goodOld, _ := asV1.Seal([]byte("sk-good"), "vendors", "good", "api_key_sealed")
	if _, err := st.SetVendorKey(context.Background(), store.Actor{KeyID: "test"}, "good", goodOld, 1); err != nil {
		t.Fatal(err)
	}

	rot, err := e.admin.RotateEncryption(ctx, &pb.RotateEncryptionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rot.GetFailed()) != 1 || rot.GetFailed()[0].GetRow() != "bad" || rot.GetFailed()[0].GetTable() != "vendors" {
		t.Fatalf("failed = %v", rot.GetFailed())
	}
	if rot.GetRewritten() != 0 {
		t.Fatalf("rewritten = %d, want 0", rot.GetRewritten())
	}
	g, _ := st.GetVendor(context.Background(), "good")
	if ver, _ := kr.Version(g.KeySealed); ver != 1 {
		t.Fatalf("good was rewritten to version %d although the rotation failed", ver)
	}
}
