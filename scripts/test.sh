#!/bin/sh
# Runs the whole test suite: gofmt, then every package's tests with the race
# detector. Needs Postgres and Redis (see README: "Running the tests").
set -eu
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:" >&2
	echo "$unformatted" >&2
	exit 1
fi
exec go test -race -count=1 -timeout 20m ./... "$@"
