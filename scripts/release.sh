#!/bin/sh
# release.sh cross-builds the gateway (switchyard) and the node agent
# (switchyard-agent) for every platform Switchyard ships on, stamps the
# version into both, and writes checksums.txt beside them in sha256sum's
# format: the files install-node.sh downloads and verifies, and the gateway
# binary the Dockerfile packs.
#
#   scripts/release.sh [--version VERSION] [--out DIR]
#
# VERSION defaults to "git describe --tags --always --dirty" (else "dev");
# DIR to dist/. The gateway is built without cgo everywhere (a static
# binary). The agent is built with cgo on linux/amd64, where it reads NVIDIA
# GPUs through NVML, which needs a C compiler (CC, default gcc); elsewhere it
# is built without cgo and reports no GPU figures. The linux/amd64 agent
# links the C library dynamically: it runs on systems whose glibc is at least
# as new as the build machine's, so build releases on an old distribution.
set -eu
cd "$(dirname "$0")/.."

module=github.com/switchyard-ai/switchyard
targets="linux/amd64 linux/arm64 darwin/arm64"

version=''
out=dist
while [ $# -gt 0 ]; do
	case $1 in
	--version)
		[ $# -ge 2 ] || {
			echo "release.sh: --version needs a value" >&2
			exit 2
		}
		version=$2
		shift
		;;
	--version=*) version=${1#*=} ;;
	--out)
		[ $# -ge 2 ] || {
			echo "release.sh: --out needs a value" >&2
			exit 2
		}
		out=$2
		shift
		;;
	--out=*) out=${1#*=} ;;
	-h | --help)
		sed -n '2,17s/^# \{0,1\}//p' "$0"
		exit 0
		;;
	*)
		echo "release.sh: unknown argument $1 (see --help)" >&2
		exit 2
		;;
	esac
	shift
done
if [ -z "$version" ]; then
	version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
fi
case $version in
'' | *[!A-Za-z0-9._+-]*)
	echo "release.sh: the version may hold letters, digits and . _ + - only, got \"$version\"" >&2
	exit 2
	;;
esac

mkdir -p "$out"
rm -f "$out"/switchyard-* "$out/checksums.txt"

# build NAME PACKAGE APP GOOS GOARCH CGO
build() {
	dest=$out/$1-$4-$5
	echo "building $dest (cgo $6)"
	# go-nvml's header marks many calls deprecated; the warnings say
	# nothing about this build.
	CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations" \
		CGO_ENABLED=$6 GOOS=$4 GOARCH=$5 go build -trimpath \
		-ldflags "-s -w -X $module/$3.version=$version" \
		-o "$dest" "./$2"
}

for target in $targets; do
	goos=${target%/*}
	goarch=${target#*/}
	build switchyard cmd/switchyard gateway/app "$goos" "$goarch" 0
	cgo=0
	if [ "$target" = linux/amd64 ]; then cgo=1; fi
	build switchyard-agent cmd/switchyard-agent agent/app "$goos" "$goarch" "$cgo"
done

(
	cd "$out"
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum switchyard-* >checksums.txt
	else
		shasum -a 256 switchyard-* >checksums.txt
	fi
)

# The binaries this machine can run must say the version they were given.
host=$(go env GOHOSTOS)/$(go env GOHOSTARCH)
for target in $targets; do
	[ "$target" = "$host" ] || continue
	for name in switchyard switchyard-agent; do
		bin=$out/$name-${target%/*}-${target#*/}
		said=$("$bin" version)
		case $said in
		"$name $version"*) ;;
		*)
			echo "release.sh: $bin version printed \"$said\", not version $version" >&2
			exit 1
			;;
		esac
	done
done

echo "release $version in $out:"
cat "$out/checksums.txt"
