package admin

import (
	"context"
	"net"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// NewGRPCServer returns a gRPC server with AdminService, NodeService, server
// reflection and gRPC health, every admin and node call guarded by a.
func NewGRPCServer(s *Server, a *Authenticator, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	opts = append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.Unary()),
		grpc.ChainStreamInterceptor(a.Stream()),
	}, opts...)
	g := grpc.NewServer(opts...)
	pb.RegisterAdminServiceServer(g, s)
	pb.RegisterNodeServiceServer(g, s)
	reflection.Register(g)
	h := health.NewServer()
	healthpb.RegisterHealthServer(g, h)
	h.SetServingStatus(pb.AdminService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(pb.NodeService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return g, h
}

// REST is AdminService as REST/JSON under /admin/v1/. It calls the gRPC
// server in-process over an in-memory connection, so REST calls pass the
// same interceptor — authentication, error mapping — as gRPC ones.
type REST struct {
	mux  *http.ServeMux
	conn *grpc.ClientConn
}

const restBuffer = 1 << 20

// NewREST serves g on an in-memory listener and returns the REST handler.
// The listener closes with g (Stop/GracefulStop); Close closes the client.
func NewREST(ctx context.Context, g *grpc.Server) (*REST, error) {
	lis := bufconn.Listen(restBuffer)
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///switchyard-inprocess",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		return nil, err
	}
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			// The SPEC's field names (tenant_id, …) are the contract, in REST too.
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
	)
	if err := pb.RegisterAdminServiceHandler(ctx, gw, conn); err != nil {
		conn.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(pb.OpenAPI)
	})
	mux.Handle("/admin/", gw)
	return &REST{mux: mux, conn: conn}, nil
}

func (r *REST) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.mux.ServeHTTP(w, req) }

// Close closes the in-process client connection.
func (r *REST) Close() error { return r.conn.Close() }
