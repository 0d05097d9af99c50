package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// fieldError is bad input in one field of a request.
type fieldError struct {
	field string
	msg   string
}

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

func invalid(field, format string, args ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

// precondition is a request that is well formed but cannot be done in the
// current state (a vendor without a key, …).
type precondition struct{ msg string }

func (e *precondition) Error() string { return e.msg }

// toStatus turns an error into a gRPC status with a message a person can
// act on. It is the only place where admin errors meet gRPC codes.
func (s *Server) toStatus(ctx context.Context, method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var fe *fieldError
	var pe *precondition
	var nf *store.NotFoundError
	var perm *permissionError
	switch {
	case errors.As(err, &perm):
		return status.Error(codes.PermissionDenied, perm.Error())
	case errors.As(err, &fe):
		return status.Error(codes.InvalidArgument, fe.Error())
	case errors.As(err, &pe):
		return status.Error(codes.FailedPrecondition, pe.Error())
	case errors.As(err, &nf):
		return status.Error(codes.NotFound, nf.Error())
	case errors.Is(err, store.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, store.ErrConflict):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, store.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, store.ErrUnavailable):
		return status.Error(codes.Unavailable, "the database is unavailable: admin changes are refused until it returns; retry later")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "the call was cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the call ran out of time")
	}
	// Unexpected: log the detail, tell the caller only that it failed, so no
	// internal detail (or anything secret it may carry) reaches the client.
	s.logger.ErrorContext(ctx, "admin call failed", slog.String("method", method), slog.String("error", err.Error()))
	return status.Error(codes.Internal, "internal error; the gateway's log has the detail")
}

// permissionError is an authenticated caller asking for what its key does
// not cover.
type permissionError struct{ msg string }

func (e *permissionError) Error() string { return e.msg }

func errPermission(format string, args ...any) error {
	return &permissionError{msg: fmt.Sprintf(format, args...)}
}
