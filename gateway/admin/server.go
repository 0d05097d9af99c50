// Package admin serves Switchyard's AdminService and NodeService over gRPC,
// with the bearer-key interceptor, and the same AdminService as REST/JSON
// through grpc-gateway under /admin/v1/. It is the one place where store and
// validation errors become gRPC statuses.
package admin

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/gateway/auth"
	"github.com/switchyard-ai/switchyard/gateway/catalog"
	"github.com/switchyard-ai/switchyard/gateway/store"
)

// Keyring seals the secrets the gateway must present again (vendor keys,
// node keys); the keyring package implements it.
type Keyring interface {
	Seal(plaintext []byte, table, row, column string) ([]byte, error)
	Reseal(sealed []byte, table, row, column string) ([]byte, error)
	Version(sealed []byte) (uint32, error)
	Primary() uint32
}

// NodePool is the gateway's live view of nodes: it takes heartbeats and
// describes a registered node with what they said.
type NodePool interface {
	Heartbeat(ctx context.Context, node store.Node, hb *pb.HeartbeatRequest) error
	Describe(ctx context.Context, node store.Node) *pb.Node
}

// VendorPauses tells until when a vendor's breaker holds it paused.
type VendorPauses interface {
	PausedUntil(vendorID string) time.Time
}

// Options wires a Server. Store and Keyring are required.
type Options struct {
	Store   store.Store
	Keyring Keyring
	Logger  *slog.Logger
	Nodes   NodePool     // nil: nodes are listed as registered, status "unknown"
	Pauses  VendorPauses // nil: no vendor is shown paused
	// Registry is the replica's last configuration, read when the database
	// is down so that heartbeats keep arriving through an outage.
	Registry          Registry
	HeartbeatInterval time.Duration
}

// Registry hands out the replica's configuration snapshot.
type Registry interface {
	Current() *catalog.Snapshot
}

// Server implements AdminService and NodeService.
type Server struct {
	pb.UnimplementedAdminServiceServer
	pb.UnimplementedNodeServiceServer

	store    store.Store
	keyring  Keyring
	logger   *slog.Logger
	nodes    NodePool
	pauses   VendorPauses
	registry Registry
	interval time.Duration
}

var (
	_ pb.AdminServiceServer = (*Server)(nil)
	_ pb.NodeServiceServer  = (*Server)(nil)
)

// DefaultHeartbeatInterval is what agents are told to use (SPEC §4.2).
const DefaultHeartbeatInterval = 5 * time.Second

// New returns a Server.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	return &Server{store: o.Store, keyring: o.Keyring, logger: o.Logger, nodes: o.Nodes, pauses: o.Pauses, registry: o.Registry, interval: o.HeartbeatInterval}
}

// --- tenants

func (s *Server) UpsertTenant(ctx context.Context, req *pb.UpsertTenantRequest) (*pb.Tenant, error) {
	if err := validateTenant(req.GetTenant()); err != nil {
		return nil, s.toStatus(ctx, "UpsertTenant", err)
	}
	t, err := s.store.UpsertTenant(ctx, actor(ctx), tenantFromPB(req.GetTenant()))
	if err != nil {
		return nil, s.toStatus(ctx, "UpsertTenant", err)
	}
	return tenantToPB(t), nil
}

func (s *Server) GetTenant(ctx context.Context, req *pb.GetTenantRequest) (*pb.Tenant, error) {
	if err := validID("id", req.GetId()); err != nil {
		return nil, s.toStatus(ctx, "GetTenant", err)
	}
	t, err := s.store.GetTenant(ctx, req.GetId())
	if err != nil {
		return nil, s.toStatus(ctx, "GetTenant", err)
	}
	return tenantToPB(t), nil
}

func (s *Server) ListTenants(ctx context.Context, _ *pb.ListTenantsRequest) (*pb.ListTenantsResponse, error) {
	ts, err := s.store.ListTenants(ctx)
	if err != nil {
		return nil, s.toStatus(ctx, "ListTenants", err)
	}
	out := &pb.ListTenantsResponse{Tenants: make([]*pb.Tenant, 0, len(ts))}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, tenantToPB(t))
	}
	return out, nil
}

func (s *Server) DeleteTenant(ctx context.Context, req *pb.DeleteTenantRequest) (*pb.DeleteTenantResponse, error) {
	if err := validID("id", req.GetId()); err != nil {
		return nil, s.toStatus(ctx, "DeleteTenant", err)
	}
	if err := s.store.DeleteTenant(ctx, actor(ctx), req.GetId()); err != nil {
		return nil, s.toStatus(ctx, "DeleteTenant", err)
	}
	return &pb.DeleteTenantResponse{}, nil
}

// --- client and admin keys

func (s *Server) CreateClientKey(ctx context.Context, req *pb.CreateClientKeyRequest) (*pb.CreateClientKeyResponse, error) {
	if err := validID("tenant_id", req.GetTenantId()); err != nil {
		return nil, s.toStatus(ctx, "CreateClientKey", err)
	}
	if err := validName("name", req.GetName()); err != nil {
		return nil, s.toStatus(ctx, "CreateClientKey", err)
	}
	m, err := auth.Mint(auth.Client)
	if err != nil {
		return nil, s.toStatus(ctx, "CreateClientKey", err)
	}
	k, err := s.store.CreateKey(ctx, actor(ctx), store.Key{
		ID: m.ID, Kind: store.KeyClient, Name: req.GetName(), TenantID: req.GetTenantId(), SecretHash: m.SecretHash,
	})
	if err != nil {
		return nil, s.toStatus(ctx, "CreateClientKey", err)
	}
	return &pb.CreateClientKeyResponse{ApiKey: m.Plaintext, Key: clientKeyToPB(k)}, nil
}

func (s *Server) ListClientKeys(ctx context.Context, req *pb.ListClientKeysRequest) (*pb.ListClientKeysResponse, error) {
	if req.GetTenantId() != "" {
		if _, err := s.store.GetTenant(ctx, req.GetTenantId()); err != nil {
			return nil, s.toStatus(ctx, "ListClientKeys", err)
		}
	}
	ks, err := s.store.ListKeys(ctx, store.KeyClient, req.GetTenantId())
	if err != nil {
		return nil, s.toStatus(ctx, "ListClientKeys", err)
	}
	out := &pb.ListClientKeysResponse{Keys: make([]*pb.ClientKey, 0, len(ks))}
	for _, k := range ks {
		out.Keys = append(out.Keys, clientKeyToPB(k))
	}
	return out, nil
}

func (s *Server) RevokeClientKey(ctx context.Context, req *pb.RevokeClientKeyRequest) (*pb.ClientKey, error) {
	if req.GetKeyId() == "" {
		return nil, s.toStatus(ctx, "RevokeClientKey", invalid("key_id", "is required"))
	}
	k, err := s.store.RevokeKey(ctx, actor(ctx), store.KeyClient, req.GetKeyId())
	if err != nil {
		return nil, s.toStatus(ctx, "RevokeClientKey", err)
	}
	return clientKeyToPB(k), nil
}

func (s *Server) CreateAdminKey(ctx context.Context, req *pb.CreateAdminKeyRequest) (*pb.CreateAdminKeyResponse, error) {
	if err := validName("name", req.GetName()); err != nil {
		return nil, s.toStatus(ctx, "CreateAdminKey", err)
	}
	m, err := auth.Mint(auth.Admin)
	if err != nil {
		return nil, s.toStatus(ctx, "CreateAdminKey", err)
	}
	k, err := s.store.CreateKey(ctx, actor(ctx), store.Key{ID: m.ID, Kind: store.KeyAdmin, Name: req.GetName(), SecretHash: m.SecretHash})
	if err != nil {
		return nil, s.toStatus(ctx, "CreateAdminKey", err)
	}
	return &pb.CreateAdminKeyResponse{ApiKey: m.Plaintext, Key: adminKeyToPB(k)}, nil
}

func (s *Server) ListAdminKeys(ctx context.Context, _ *pb.ListAdminKeysRequest) (*pb.ListAdminKeysResponse, error) {
	ks, err := s.store.ListKeys(ctx, store.KeyAdmin, "")
	if err != nil {
		return nil, s.toStatus(ctx, "ListAdminKeys", err)
	}
	out := &pb.ListAdminKeysResponse{Keys: make([]*pb.AdminKey, 0, len(ks))}
	for _, k := range ks {
		out.Keys = append(out.Keys, adminKeyToPB(k))
	}
	return out, nil
}

func (s *Server) RevokeAdminKey(ctx context.Context, req *pb.RevokeAdminKeyRequest) (*pb.AdminKey, error) {
	if req.GetKeyId() == "" {
		return nil, s.toStatus(ctx, "RevokeAdminKey", invalid("key_id", "is required"))
	}
	k, err := s.store.RevokeKey(ctx, actor(ctx), store.KeyAdmin, req.GetKeyId())
	if err != nil {
		return nil, s.toStatus(ctx, "RevokeAdminKey", err)
	}
	return adminKeyToPB(k), nil
}

// --- vendors

// Where sealed secrets live; the keyring binds each value to these.
const (
	vendorsTable    = "vendors"
	vendorKeyColumn = "api_key_sealed"
	keysTable       = "api_keys"
	keySecretColumn = "secret_sealed"
)

func (s *Server) pausedUntil(id string) time.Time {
	if s.pauses == nil {
		return time.Time{}
	}
	if t := s.pauses.PausedUntil(id); t.After(time.Now()) {
		return t
	}
	return time.Time{}
}

func (s *Server) UpsertVendor(ctx context.Context, req *pb.UpsertVendorRequest) (*pb.Vendor, error) {
	if err := validateVendor(req.GetVendor()); err != nil {
		return nil, s.toStatus(ctx, "UpsertVendor", err)
	}
	v := req.GetVendor()
	out, err := s.store.UpsertVendor(ctx, actor(ctx), store.Vendor{ID: v.GetId(), BaseURL: v.GetBaseUrl(), Enabled: v.GetEnabled()})
	if err != nil {
		return nil, s.toStatus(ctx, "UpsertVendor", err)
	}
	return vendorToPB(out, s.pausedUntil(out.ID)), nil
}

func (s *Server) SetVendorKey(ctx context.Context, req *pb.SetVendorKeyRequest) (*pb.Vendor, error) {
	if err := validID("vendor_id", req.GetVendorId()); err != nil {
		return nil, s.toStatus(ctx, "SetVendorKey", err)
	}
	if err := validateAPIKey("api_key", req.GetApiKey()); err != nil {
		return nil, s.toStatus(ctx, "SetVendorKey", err)
	}
	if _, err := s.store.GetVendor(ctx, req.GetVendorId()); err != nil {
		return nil, s.toStatus(ctx, "SetVendorKey", err)
	}
	sealed, err := s.keyring.Seal([]byte(req.GetApiKey()), vendorsTable, req.GetVendorId(), vendorKeyColumn)
	if err != nil {
		return nil, s.toStatus(ctx, "SetVendorKey", err)
	}
	v, err := s.store.SetVendorKey(ctx, actor(ctx), req.GetVendorId(), sealed, s.keyring.Primary())
	if err != nil {
		return nil, s.toStatus(ctx, "SetVendorKey", err)
	}
	return vendorToPB(v, s.pausedUntil(v.ID)), nil
}

func (s *Server) ListVendors(ctx context.Context, _ *pb.ListVendorsRequest) (*pb.ListVendorsResponse, error) {
	vs, err := s.store.ListVendors(ctx)
	if err != nil {
		return nil, s.toStatus(ctx, "ListVendors", err)
	}
	out := &pb.ListVendorsResponse{Vendors: make([]*pb.Vendor, 0, len(vs))}
	for _, v := range vs {
		out.Vendors = append(out.Vendors, vendorToPB(v, s.pausedUntil(v.ID)))
	}
	return out, nil
}

func (s *Server) DeleteVendor(ctx context.Context, req *pb.DeleteVendorRequest) (*pb.DeleteVendorResponse, error) {
	if err := validID("id", req.GetId()); err != nil {
		return nil, s.toStatus(ctx, "DeleteVendor", err)
	}
	if err := s.store.DeleteVendor(ctx, actor(ctx), req.GetId()); err != nil {
		return nil, s.toStatus(ctx, "DeleteVendor", err)
	}
	return &pb.DeleteVendorResponse{}, nil
}

// --- models

// DefaultQueueTimeout applies to models registered without queue_timeout_ms.
const DefaultQueueTimeout = 2000 * time.Millisecond

func (s *Server) UpsertModel(ctx context.Context, req *pb.UpsertModelRequest) (*pb.Model, error) {
	if err := validateModel(req.GetModel()); err != nil {
		return nil, s.toStatus(ctx, "UpsertModel", err)
	}
	m := req.GetModel()
	for i, f := range m.GetFallbacks() {
		if _, err := s.store.GetModel(ctx, f); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil, s.toStatus(ctx, "UpsertModel", invalid(indexed("model.fallbacks", i), "model %q is not registered; register it first", f))
			}
			return nil, s.toStatus(ctx, "UpsertModel", err)
		}
	}
	efforts := make([]string, 0, len(m.GetEfforts()))
	for _, e := range m.GetEfforts() {
		if n := effortNames[e]; !slices.Contains(efforts, n) {
			efforts = append(efforts, n)
		}
	}
	sm := store.Model{
		ID:                 m.GetId(),
		Vendor:             m.GetVendor(),
		UpstreamModel:      m.GetUpstreamModel(),
		Efforts:            efforts,
		Capabilities:       m.GetCapabilities(),
		ContextWindow:      m.GetContextWindow(),
		DefaultMaxTokens:   m.GetDefaultMaxTokens(),
		QueueTimeoutMS:     m.GetQueueTimeoutMs(),
		Fallbacks:          m.GetFallbacks(),
		InputPricePerMTok:  m.GetInputPricePerMtok(),
		OutputPricePerMTok: m.GetOutputPricePerMtok(),
		Enabled:            m.GetEnabled(),
	}
	if sm.UpstreamModel == "" {
		sm.UpstreamModel = sm.ID
	}
	if sm.QueueTimeoutMS == 0 {
		sm.QueueTimeoutMS = int32(DefaultQueueTimeout / time.Millisecond)
	}
	out, err := s.store.UpsertModel(ctx, actor(ctx), sm)
	if err != nil {
		return nil, s.toStatus(ctx, "UpsertModel", err)
	}
	return modelToPB(out), nil
}

func (s *Server) GetModel(ctx context.Context, req *pb.GetModelRequest) (*pb.Model, error) {
	if err := validModelID("id", req.GetId()); err != nil {
		return nil, s.toStatus(ctx, "GetModel", err)
	}
	m, err := s.store.GetModel(ctx, req.GetId())
	if err != nil {
		return nil, s.toStatus(ctx, "GetModel", err)
	}
	return modelToPB(m), nil
}

func (s *Server) ListModels(ctx context.Context, _ *pb.ListModelsRequest) (*pb.ListModelsResponse, error) {
	ms, err := s.store.ListModels(ctx)
	if err != nil {
		return nil, s.toStatus(ctx, "ListModels", err)
	}
	out := &pb.ListModelsResponse{Models: make([]*pb.Model, 0, len(ms))}
	for _, m := range ms {
		out.Models = append(out.Models, modelToPB(m))
	}
	return out, nil
}

func (s *Server) DeleteModel(ctx context.Context, req *pb.DeleteModelRequest) (*pb.DeleteModelResponse, error) {
	if err := validModelID("id", req.GetId()); err != nil {
		return nil, s.toStatus(ctx, "DeleteModel", err)
	}
	if err := s.store.DeleteModel(ctx, actor(ctx), req.GetId()); err != nil {
		return nil, s.toStatus(ctx, "DeleteModel", err)
	}
	return &pb.DeleteModelResponse{}, nil
}

// --- nodes

func (s *Server) MintNodeKey(ctx context.Context, req *pb.MintNodeKeyRequest) (*pb.MintNodeKeyResponse, error) {
	if err := validID("node_id", req.GetNodeId()); err != nil {
		return nil, s.toStatus(ctx, "MintNodeKey", err)
	}
	if err := validName("name", req.GetName()); err != nil {
		return nil, s.toStatus(ctx, "MintNodeKey", err)
	}
	m, err := auth.Mint(auth.Node)
	if err != nil {
		return nil, s.toStatus(ctx, "MintNodeKey", err)
	}
	sealed, err := s.keyring.Seal([]byte(m.Plaintext), keysTable, m.ID, keySecretColumn)
	if err != nil {
		return nil, s.toStatus(ctx, "MintNodeKey", err)
	}
	name := req.GetName()
	if name == "" {
		name = req.GetNodeId()
	}
	k, err := s.store.CreateKey(ctx, actor(ctx), store.Key{
		ID: m.ID, Kind: store.KeyNode, Name: name, NodeID: req.GetNodeId(), SecretHash: m.SecretHash, Sealed: sealed,
	})
	if err != nil {
		return nil, s.toStatus(ctx, "MintNodeKey", err)
	}
	return &pb.MintNodeKeyResponse{ApiKey: m.Plaintext, NodeId: k.NodeID, KeyId: k.ID}, nil
}

func (s *Server) RevokeNodeKey(ctx context.Context, req *pb.RevokeNodeKeyRequest) (*pb.RevokeNodeKeyResponse, error) {
	if err := validID("node_id", req.GetNodeId()); err != nil {
		return nil, s.toStatus(ctx, "RevokeNodeKey", err)
	}
	k, err := s.store.NodeKey(ctx, req.GetNodeId())
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, s.toStatus(ctx, "RevokeNodeKey", store.NotFound("node key for node", req.GetNodeId()))
		}
		return nil, s.toStatus(ctx, "RevokeNodeKey", err)
	}
	if _, err := s.store.RevokeKey(ctx, actor(ctx), store.KeyNode, k.ID); err != nil {
		return nil, s.toStatus(ctx, "RevokeNodeKey", err)
	}
	return &pb.RevokeNodeKeyResponse{}, nil
}

func (s *Server) describeNode(ctx context.Context, n store.Node) *pb.Node {
	if s.nodes != nil {
		if d := s.nodes.Describe(ctx, n); d != nil {
			return d
		}
	}
	return &pb.Node{NodeId: n.ID, Name: n.Name, Status: "unknown", Weight: n.Weight, DrainRequested: n.Drain, Draining: n.Drain}
}

func (s *Server) ListNodes(ctx context.Context, _ *pb.ListNodesRequest) (*pb.ListNodesResponse, error) {
	ns, err := s.store.ListNodes(ctx)
	if err != nil {
		return nil, s.toStatus(ctx, "ListNodes", err)
	}
	out := &pb.ListNodesResponse{Nodes: make([]*pb.Node, 0, len(ns))}
	for _, n := range ns {
		out.Nodes = append(out.Nodes, s.describeNode(ctx, n))
	}
	return out, nil
}

func (s *Server) DrainNode(ctx context.Context, req *pb.DrainNodeRequest) (*pb.Node, error) {
	if err := validID("node_id", req.GetNodeId()); err != nil {
		return nil, s.toStatus(ctx, "DrainNode", err)
	}
	n, err := s.store.SetNodeDrain(ctx, actor(ctx), req.GetNodeId(), req.GetDrain())
	if err != nil {
		return nil, s.toStatus(ctx, "DrainNode", err)
	}
	return s.describeNode(ctx, n), nil
}

// MaxNodeWeight bounds SetNodeWeight; weights are relative, so a bound
// only guards against typos.
const MaxNodeWeight = 1000

func (s *Server) SetNodeWeight(ctx context.Context, req *pb.SetNodeWeightRequest) (*pb.Node, error) {
	if err := validID("node_id", req.GetNodeId()); err != nil {
		return nil, s.toStatus(ctx, "SetNodeWeight", err)
	}
	if w := req.GetWeight(); !(w > 0 && w <= MaxNodeWeight) {
		return nil, s.toStatus(ctx, "SetNodeWeight", invalid("weight", "must be > 0 and ≤ %d; to stop traffic to a node use DrainNode", MaxNodeWeight))
	}
	n, err := s.store.SetNodeWeight(ctx, actor(ctx), req.GetNodeId(), req.GetWeight())
	if err != nil {
		return nil, s.toStatus(ctx, "SetNodeWeight", err)
	}
	return s.describeNode(ctx, n), nil
}

// --- encryption

type resealer struct{ k Keyring }

func (r resealer) Reseal(ref store.SealedRef, sealed []byte) ([]byte, error) {
	return r.k.Reseal(sealed, ref.Table, ref.Row, ref.Column)
}

func (r resealer) Version(sealed []byte) (uint32, error) { return r.k.Version(sealed) }

func (s *Server) RotateEncryption(ctx context.Context, req *pb.RotateEncryptionRequest) (*pb.RotateEncryptionResponse, error) {
	rep, err := s.store.ResealAll(ctx, actor(ctx), resealer{s.keyring}, req.GetDryRun())
	if err != nil {
		return nil, s.toStatus(ctx, "RotateEncryption", err)
	}
	out := &pb.RotateEncryptionResponse{
		Rewritten:      rep.Rewritten,
		RowsPerVersion: rep.RowsPerVersion,
		PrimaryVersion: s.keyring.Primary(),
		DryRun:         req.GetDryRun(),
	}
	for _, f := range rep.Failed {
		out.Failed = append(out.Failed, &pb.SealedValueError{
			Table: f.Ref.Table, Row: f.Ref.Row, Column: f.Ref.Column, Reason: f.Err.Error(),
		})
	}
	if len(out.Failed) > 0 {
		s.logger.WarnContext(ctx, "encryption rotation wrote nothing: some values could not be opened",
			slog.Int("failed", len(out.Failed)))
	}
	return out, nil
}

// --- usage and audit

var groupWords = []string{"tenant", "model", "target", "day", "month"}

func (s *Server) GetUsage(ctx context.Context, req *pb.GetUsageRequest) (*pb.GetUsageResponse, error) {
	for i, g := range req.GetGroupBy() {
		if !slices.Contains(groupWords, g) {
			return nil, s.toStatus(ctx, "GetUsage", invalid(indexed("group_by", i), "%q is not one of tenant, model, target, day, month", g))
		}
	}
	q := store.UsageQuery{
		TenantID: req.GetTenantId(),
		Model:    req.GetModel(),
		Since:    fromTS(req.GetSince()),
		Until:    fromTS(req.GetUntil()),
		GroupBy:  req.GetGroupBy(),
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return nil, s.toStatus(ctx, "GetUsage", invalid("until", "is before since"))
	}
	rows, err := s.store.QueryUsage(ctx, q)
	if err != nil {
		return nil, s.toStatus(ctx, "GetUsage", err)
	}
	out := &pb.GetUsageResponse{Rows: make([]*pb.UsageRow, 0, len(rows))}
	for _, r := range rows {
		out.Rows = append(out.Rows, usageToPB(r))
	}
	return out, nil
}

// Audit listing bounds.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
)

func (s *Server) ListAuditLog(ctx context.Context, req *pb.ListAuditLogRequest) (*pb.ListAuditLogResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit < 0:
		return nil, s.toStatus(ctx, "ListAuditLog", invalid("limit", "must not be negative"))
	case limit == 0:
		limit = DefaultAuditLimit
	case limit > MaxAuditLimit:
		limit = MaxAuditLimit
	}
	es, err := s.store.ListAudit(ctx, fromTS(req.GetSince()), limit)
	if err != nil {
		return nil, s.toStatus(ctx, "ListAuditLog", err)
	}
	out := &pb.ListAuditLogResponse{Entries: make([]*pb.AuditEntry, 0, len(es))}
	for _, e := range es {
		out.Entries = append(out.Entries, auditToPB(e))
	}
	return out, nil
}

// --- NodeService

func (s *Server) Heartbeat(ctx context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	p, _ := PrincipalFrom(ctx)
	if req.GetNodeId() == "" {
		return nil, s.toStatus(ctx, "Heartbeat", invalid("node_id", "is required"))
	}
	if p.NodeID != req.GetNodeId() {
		return nil, s.toStatus(ctx, "Heartbeat", errPermission("this key belongs to node %q, not %q", p.NodeID, req.GetNodeId()))
	}
	// The replica's configuration snapshot answers for registered nodes, so
	// that heartbeats (and with them the nodes' health) never wait on
	// Postgres: a hung database would otherwise hold every heartbeat until
	// the agent gives up, and the nodes would turn offline. A node
	// registered a moment ago, not in the snapshot yet, is read from the
	// store.
	var n store.Node
	var err error
	known, ok := store.Node{}, false
	if s.registry != nil {
		known, ok = s.registry.Current().Nodes[req.GetNodeId()]
	}
	if ok {
		n = known
	} else {
		n, err = s.store.GetNode(ctx, req.GetNodeId())
	}
	if err != nil {
		return nil, s.toStatus(ctx, "Heartbeat", err)
	}
	if s.nodes != nil {
		if err := s.nodes.Heartbeat(ctx, n, req); err != nil {
			return nil, s.toStatus(ctx, "Heartbeat", err)
		}
	}
	return &pb.HeartbeatResponse{Drain: n.Drain, IntervalMs: int32(s.interval / time.Millisecond)}, nil
}
