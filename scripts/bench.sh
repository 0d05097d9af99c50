#!/bin/sh
# Measures Switchyard and writes BENCHMARKS.md and the raw JSON under
# bench/results/: added latency over direct and over nginx at fixed rates,
# streaming, heap per open stream, the gateway's CPU profile, routing
# quality on a simulated mixed cluster, and the benchmarks beside the code.
#
# Needs Postgres (SWITCHYARD_BENCH_DATABASE_URL, default
# postgres://postgres@127.0.0.1:5432/postgres, allowed to create databases)
# and Redis (SWITCHYARD_BENCH_REDIS_URL, default redis://127.0.0.1:6379);
# nginx on PATH (or pass --nginx ''); perf is used when present. The bench
# creates its own database and Redis key prefix and removes them.
#
# Arguments go to switchyard-bench (see scripts/bench.sh -h), e.g. a short
# run: scripts/bench.sh --rates 500,1000 --reps 1 --streams 1000
set -eu
cd "$(dirname "$0")/.."

case " $* " in
*" --nginx "* | *" --nginx="* | *" -nginx "* | *" -nginx="*) ;;
*)
	if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
		echo "bench: nginx is not installed; the benchmark compares Switchyard with it." >&2
		echo "  Debian/Ubuntu: sudo apt-get install nginx    macOS: brew install nginx" >&2
		echo "  or run without the nginx arms: scripts/bench.sh --nginx ''" >&2
		exit 2
	fi
	;;
esac
nginx_flag=""
if ! command -v nginx >/dev/null 2>&1 && [ -x /usr/sbin/nginx ]; then
	nginx_flag="--nginx=/usr/sbin/nginx" # Debian installs it outside a user's PATH
fi

bin=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-bench-bin.XXXXXX")
trap 'rm -rf "$bin"' EXIT INT TERM
echo "bench: building the binaries" >&2
for cmd in switchyard switchyard-agent simengine switchyard-bench; do
	go build -o "$bin/$cmd" "./cmd/$cmd"
done

# shellcheck disable=SC2086 # nginx_flag is one word or none
SWITCHYARD_BENCH_INVOCATION=scripts/bench.sh "$bin/switchyard-bench" --bin "$bin" $nginx_flag "$@"
