# tfjob/runtime-cpu:0.1.0 — the strategy runtime (every TF_CONFIG role), the
# local runner and the custom-training-loop example, with the example job
# files under /opt/tfjob/examples (the manifests in examples/ point there).
# Build from the repository root:
#   docker build -f docker/runtime-cpu.Dockerfile -t tfjob/runtime-cpu:0.1.0 .
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
      libgoogle-perftools-dev libdnnl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . /src
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTFJOB_NATIVE=OFF -DTFJOB_CUDA=OFF \
 && cmake --build build --target tfjob-runtime tfjob custom_training_loop

# ---- runtime: only the shared libraries `ldd` names for these binaries
# (gRPC brings absl, c-ares and re2 as its own dependencies; cpp-httplib brotli;
# cpprestsdk is the Kubernetes client of TFJOB_CLUSTER_RESOLVER=kubernetes; HDF5,
# for Keras .weights.h5, brings its own compression libraries).
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libyaml-cpp0.7 libcpp-httplib0.11 libprometheus-cpp-core1.0 libcpprest2.10 \
      libbrotli1 libgomp1 libssl3 zlib1g libhdf5-103-1 libtcmalloc-minimal4 libdnnl2 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/bin/tfjob-runtime /usr/local/bin/tfjob-runtime
COPY --from=build /src/build/bin/tfjob /usr/local/bin/tfjob
COPY --from=build /src/build/bin/custom_training_loop /usr/local/bin/custom_training_loop
COPY examples/ /opt/tfjob/examples/
# Numeric so that runAsNonRoot can verify it without an /etc/passwd lookup.
USER 65532:65532
WORKDIR /opt/tfjob
# TFJob manifests set the command; with none the image runs the runtime
# (`IMAGE fit ...`), or one of its programs (`IMAGE tfjob run ...`).
COPY docker/runtime-entrypoint.sh /usr/local/bin/tfjob-entrypoint
ENTRYPOINT ["/usr/local/bin/tfjob-entrypoint"]
