# tfjob/operator:0.1.0 — the TFJob operator (kubeflow.org/v1).
# Build from the repository root:
#   docker build -f docker/operator.Dockerfile -t tfjob/operator:0.1.0 .
# docker/tests checks that everything copied here exists after a build.

# ---- build: the same Debian packages as scripts/setup.sh (minus the Python
# benchmark ones); -march=native off so the image runs on any x86-64 node.
FROM debian:bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libcpprest-dev libcpp-httplib-dev prometheus-cpp-dev nlohmann-json3-dev libyaml-cpp-dev libeigen3-dev \
      libgtest-dev libgmock-dev libbenchmark-dev libssl-dev zlib1g-dev libhdf5-dev libfarmhash-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . /src
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTFJOB_NATIVE=OFF -DTFJOB_CUDA=OFF \
 && cmake --build build --target tfjob-operator

# ---- runtime: only the shared libraries `ldd build/bin/tfjob-operator`
# names (cpprestsdk pulls in brotli; libstdc++/libgcc come with them).
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libcpprest2.10 libcpp-httplib0.11 libprometheus-cpp-core1.0 libyaml-cpp0.7 libssl3 libbrotli1 zlib1g ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/bin/tfjob-operator /usr/local/bin/tfjob-operator
# Numeric so that runAsNonRoot can verify it without an /etc/passwd lookup.
USER 65532:65532
# 8080 /metrics, 8081 /healthz and /readyz (the binary's defaults).
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tfjob-operator"]
