package app

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// TestCallScopeBoundsAdminCalls: an admin call without a deadline gets
// one (a hung database then answers UNAVAILABLE instead of holding the
// caller), RotateEncryption and GetUsage a longer one, an earlier deadline of the
// caller's own stays, and node calls are not bounded here.
func TestCallScopeBoundsAdminCalls(t *testing.T) {
	for _, tc := range []struct {
		method string
		own    time.Duration // the caller's deadline; 0: none
		want   time.Duration // 0: no deadline
	}{
		{"/switchyard.v1.AdminService/UpsertTenant", 0, adminCallTimeout},
		{"/switchyard.v1.AdminService/RotateEncryption", 0, longCallTimeout},
		{"/switchyard.v1.AdminService/GetUsage", 0, longCallTimeout},
		{"/switchyard.v1.AdminService/ListTenants", 2 * time.Second, 2 * time.Second},
		{"/switchyard.v1.NodeService/Heartbeat", 0, 0},
	} {
		t.Run(tc.method, func(t *testing.T) {
			ctx := context.Background()
			if tc.own > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.own)
				defer cancel()
			}
			start := time.Now()
			_, _ = callScope(ctx, nil, &grpc.UnaryServerInfo{FullMethod: tc.method}, func(ctx context.Context, _ any) (any, error) {
				d, ok := ctx.Deadline()
				switch {
				case tc.want == 0 && ok:
					t.Errorf("deadline set: %v", d.Sub(start))
				case tc.want > 0 && !ok:
					t.Error("no deadline")
				case tc.want > 0 && (d.Sub(start) > tc.want+time.Second || d.Sub(start) < tc.want-time.Second):
					t.Errorf("deadline in %v, want %v", d.Sub(start), tc.want)
				}
				return nil, nil
			})
		})
	}
}
