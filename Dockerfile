# The gateway's image: the binary scripts/release.sh built, on a distroless
# base that holds CA certificates and a non-root user and nothing else (no
# shell, no package manager). Nothing is compiled here, so the image carries
# exactly the binary whose SHA-256 is in dist/checksums.txt. The build
# context is the release folder, not the repository:
#
#   scripts/release.sh --version v1.2.3
#   docker buildx build -f Dockerfile --platform linux/amd64,linux/arm64 -t switchyard:v1.2.3 dist
#
# BuildKit sets TARGETARCH for each platform; the classic builder needs
# --build-arg TARGETARCH=amd64 (or arm64).
FROM gcr.io/distroless/static-debian12:nonroot

ARG TARGETARCH
COPY switchyard-linux-${TARGETARCH} /usr/local/bin/switchyard

# 65532 is distroless's "nonroot" user; numeric, so that Kubernetes can
# check runAsNonRoot.
USER 65532:65532

# HTTP (OpenAI API, REST admin, /healthz, /readyz), gRPC, Prometheus metrics.
EXPOSE 8080 9090 9100

ENTRYPOINT ["/usr/local/bin/switchyard"]
CMD ["serve"]
