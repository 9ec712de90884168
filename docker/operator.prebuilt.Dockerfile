# tfjob/operator:0.1.0 from a tfjob-operator already built on the host, for
# CI and scripts/images.sh, which stages the context (BUILD/images/context:
# build/bin/ with stripped binaries, laid out as the repository). The final
# stage of operator.Dockerfile, the same packages (docker/tests checks they
# stay the same), without the build stage. The binary is the host build's:
# with -march=native it runs only on CPUs like the build machine's (use
# `scripts/images.sh --portable`, or operator.Dockerfile, for distribution).
#   scripts/images.sh operator
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libcpprest2.10 libcpp-httplib0.11 libprometheus-cpp-core1.0 libyaml-cpp0.7 libssl3 libbrotli1 zlib1g ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY build/bin/tfjob-operator /usr/local/bin/tfjob-operator
# Numeric so that runAsNonRoot can verify it without an /etc/passwd lookup.
USER 65532:65532
# 8080 /metrics, 8081 /healthz and /readyz (the binary's defaults).
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tfjob-operator"]
