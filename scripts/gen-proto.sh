#!/bin/sh
# Regenerates the Go code and the OpenAPI document from proto/switchyard/v1.
#
#   scripts/gen-proto.sh            write into proto/switchyard/v1
#   scripts/gen-proto.sh OUTDIR     write into OUTDIR (the staleness test uses this)
#
# Needs protoc (Debian: protobuf-compiler) and npm. The protoc plugins are
# installed at pinned versions with `go install` into .cache/bin, and
# google/api/*.proto comes from the npm package google-proto-files.
set -eu

PROTOC_GEN_GO=v1.36.12         # google.golang.org/protobuf
PROTOC_GEN_GO_GRPC=v1.6.2      # google.golang.org/grpc/cmd/protoc-gen-go-grpc
GRPC_GATEWAY=v2.33.0           # github.com/grpc-ecosystem/grpc-gateway/v2
GOOGLE_PROTO_FILES=6.0.1       # npm google-proto-files

root=$(cd "$(dirname "$0")/.." && pwd)
cache="$root/.cache"
bin="$cache/bin"
out=${1:-"$root/proto/switchyard/v1"}
mkdir -p "$bin" "$out"

command -v protoc >/dev/null 2>&1 || {
	echo "gen-proto: protoc not found; install it (apt-get install protobuf-compiler)" >&2
	exit 1
}

stamp="$bin/.versions"
want="$PROTOC_GEN_GO $PROTOC_GEN_GO_GRPC $GRPC_GATEWAY"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
	GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO"
	GOBIN="$bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC"
	GOBIN="$bin" go install "github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$GRPC_GATEWAY"
	GOBIN="$bin" go install "github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$GRPC_GATEWAY"
	echo "$want" >"$stamp"
fi

gapi="$cache/google-proto-files-$GOOGLE_PROTO_FILES"
if [ ! -f "$gapi/google/api/annotations.proto" ]; then
	tmp=$(mktemp -d)
	(cd "$tmp" && npm pack --silent "google-proto-files@$GOOGLE_PROTO_FILES" >/dev/null && tar xzf google-proto-files-*.tgz)
	mkdir -p "$gapi/google"
	rm -rf "$gapi/google/api"
	cp -R "$tmp/package/google/api" "$gapi/google/api"
	rm -rf "$tmp"
fi

# protoc's own well-known types come first so that only google/api is taken
# from the npm package.
wkt=""
for d in /usr/include /usr/local/include; do
	[ -f "$d/google/protobuf/timestamp.proto" ] && wkt="$d" && break
done
[ -n "$wkt" ] || { echo "gen-proto: google/protobuf/timestamp.proto not found next to protoc" >&2; exit 1; }

gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
cd "$root/proto"
PATH="$bin:$PATH" protoc -I "$wkt" -I "$gapi" -I . \
	--go_out="$gen" --go_opt=paths=source_relative \
	--go-grpc_out="$gen" --go-grpc_opt=paths=source_relative \
	--grpc-gateway_out="$gen" --grpc-gateway_opt=paths=source_relative \
	--openapiv2_out="$gen" --openapiv2_opt=allow_merge=true,merge_file_name=switchyard,json_names_for_fields=false \
	switchyard/v1/admin.proto switchyard/v1/node.proto
cp "$gen"/switchyard/v1/*.go "$out"/
cp "$gen"/switchyard.swagger.json "$out"/switchyard.swagger.json
