package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/gateway/admin"
	"github.com/switchyard-ai/switchyard/gateway/auth"
	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/store/postgres"
	"github.com/switchyard-ai/switchyard/internal/testenv"
	"github.com/switchyard-ai/switchyard/keyring"
)

const bootstrapKey = "bootstrap-canary-0123456789abcdef"

// syncBuffer collects log output from concurrent goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is one gateway's admin surface: a gRPC client and a REST base URL,
// over a real Postgres database.
type env struct {
	t     *testing.T
	store store.Store
	kr    *keyring.Keyring
	conn  *grpc.ClientConn
	admin pb.AdminServiceClient
	node  pb.NodeServiceClient
	rest  string
	logs  *syncBuffer
}

func newKeyring(t *testing.T, spec string) *keyring.Keyring {
	t.Helper()
	kr, err := keyring.Parse(spec, "")
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func keySpec(t *testing.T, versions ...int) string {
	t.Helper()
	var parts []string
	for _, v := range versions {
		k, err := keyring.Generate()
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, strconv.Itoa(v)+":"+k)
	}
	return strings.Join(parts, ",")
}

func openStore(t *testing.T, url string) store.Store {
	t.Helper()
	ctx := context.Background()
	pg, err := postgres.New(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	return pg
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, openStore(t, testenv.Postgres(t)), newKeyring(t, keySpec(t, 1)))
}

func newEnvWith(t *testing.T, st store.Store, kr *keyring.Keyring) *env {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := admin.New(admin.Options{Store: st, Keyring: kr, Logger: logger})
	// The config version, read live, makes a revocation count at once.
	resolver := auth.NewResolver(st, auth.ResolverOptions{Version: func() int64 {
		v, _ := st.ConfigVersion(context.Background())
		return v
	}})
	g, _ := admin.NewGRPCServer(srv, admin.NewAuthenticator(resolver, bootstrapKey))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	rest, err := admin.NewREST(context.Background(), g)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rest)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		hs.Close()
		rest.Close()
		g.Stop()
	})
	return &env{t: t, store: st, kr: kr, conn: conn, admin: pb.NewAdminServiceClient(conn), node: pb.NewNodeServiceClient(conn), rest: hs.URL, logs: logs}
}

func withKey(key string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	_ = cancel // the deadline ends it; tests are short
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

func wantCode(t *testing.T, err error, code codes.Code, contains ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want %s", err, code)
	}
	for _, c := range contains {
		if !strings.Contains(status.Convert(err).Message(), c) {
			t.Fatalf("message %q does not name %q", status.Convert(err).Message(), c)
		}
	}
}

// do calls the REST API and decodes the JSON answer into a map.
func (e *env) do(method, path, key string, body any) (int, map[string]any, string) {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.rest+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, m, string(raw)
}
