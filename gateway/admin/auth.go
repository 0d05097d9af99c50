package admin

import (
	"context"
	"crypto/subtle"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/gateway/auth"
	"github.com/switchyard-ai/switchyard/gateway/store"
)

// BootstrapActor is the actor id recorded when the bootstrap admin key is used.
const BootstrapActor = "bootstrap"

// Principal is who called: an admin (KeyID, or BootstrapActor) or a node.
type Principal struct {
	Kind   auth.Kind
	KeyID  string
	NodeID string // node keys: the node the key belongs to
}

type principalKey struct{}

// PrincipalFrom returns the caller authenticated by the interceptor.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// KeyResolver checks a presented key of a kind (auth.Resolver: cached, and
// working from cache through a database outage's grace).
type KeyResolver interface {
	Resolve(ctx context.Context, presented string, want auth.Kind) (store.Key, error)
}

// Authenticator checks the bearer key of every AdminService and NodeService
// call. Health and reflection stay open: they reveal nothing a port scan
// does not.
type Authenticator struct {
	keys      KeyResolver
	bootstrap string
}

// NewAuthenticator checks keys with keys; bootstrap, when not empty, is an
// admin key accepted as is (SWITCHYARD_BOOTSTRAP_ADMIN_KEY).
func NewAuthenticator(keys KeyResolver, bootstrap string) *Authenticator {
	return &Authenticator{keys: keys, bootstrap: bootstrap}
}

const (
	adminPrefix = "/switchyard.v1.AdminService/"
	nodePrefix  = "/switchyard.v1.NodeService/"
)

func (a *Authenticator) required(method string) (auth.Kind, bool) {
	switch {
	case strings.HasPrefix(method, adminPrefix):
		return auth.Admin, true
	case strings.HasPrefix(method, nodePrefix):
		return auth.Node, true
	}
	return "", false
}

// Unary is the unary server interceptor.
func (a *Authenticator) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.authenticate(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream is the stream server interceptor.
func (a *Authenticator) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.authenticate(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &wrappedStream{ServerStream: ss, ctx: ctx})
	}
}

type wrappedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (w *wrappedStream) Context() context.Context { return w.ctx }

func (a *Authenticator) authenticate(ctx context.Context, method string) (context.Context, error) {
	want, ok := a.required(method)
	if !ok {
		return ctx, nil
	}
	key := bearer(ctx)
	if key == "" {
		return nil, status.Errorf(codes.Unauthenticated, "missing key: send `authorization: Bearer %s…`", want.Prefix())
	}
	if want == auth.Admin && a.bootstrap != "" &&
		subtle.ConstantTimeCompare([]byte(key), []byte(a.bootstrap)) == 1 {
		return context.WithValue(ctx, principalKey{}, Principal{Kind: auth.Admin, KeyID: BootstrapActor}), nil
	}
	p, err := a.check(ctx, key, want)
	if err != nil {
		return nil, err
	}
	return context.WithValue(ctx, principalKey{}, p), nil
}

func (a *Authenticator) check(ctx context.Context, key string, want auth.Kind) (Principal, error) {
	parsed, err := auth.Parse(key)
	if err != nil || parsed.Kind != want {
		return Principal{}, status.Errorf(codes.Unauthenticated, "invalid key: this call needs a %s key (%s…)", want, want.Prefix())
	}
	k, err := a.keys.Resolve(ctx, key, want)
	switch {
	case errors.Is(err, auth.ErrRevokedKey):
		return Principal{}, status.Error(codes.Unauthenticated, "key revoked")
	case errors.Is(err, auth.ErrInvalidKey), errors.Is(err, auth.ErrMissingKey):
		return Principal{}, status.Error(codes.Unauthenticated, "invalid key")
	case errors.Is(err, auth.ErrUnavailable):
		return Principal{}, status.Error(codes.Unavailable, "the database is unavailable, so the key cannot be checked; retry when it is back")
	case err != nil:
		return Principal{}, status.Error(codes.Internal, "the key could not be checked")
	}
	return Principal{Kind: want, KeyID: k.ID, NodeID: k.NodeID}, nil
}

func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if k := auth.FromHeader(v); k != "" {
			return k
		}
	}
	return ""
}

func actor(ctx context.Context) store.Actor {
	p, _ := PrincipalFrom(ctx)
	return store.Actor{KeyID: p.KeyID}
}

// WithPrincipal returns ctx carrying p, for in-process callers of Server
// (the dev demo seeding its data) that have no key to present.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}
