# tfjob/runtime-gpu:0.1.0 — runtime-cpu's binaries and examples built with the
# CUDA option on: tfjob-runtime links the CUDA device backend (services/gpu:
# CUDA kernels and cuBLAS) and NCCL, so fit trains on the pod's GPUs
# (--device auto uses them when visible, --device gpu requires them) and
# multi-worker mirrored all-reduces with NCCL. On a CUDA 13 runtime base that
# carries NCCL (libnccl2) and cuBLAS.
# Build from the repository root:
#   docker build -f docker/runtime-gpu.Dockerfile -t tfjob/runtime-gpu:0.1.0 .
# docker/tests checks that everything copied here exists after a build.

# ---- build: NVIDIA's devel image (nvcc, cudart, libnccl-dev) plus the build
# packages of scripts/setup.sh, which have the same names on Ubuntu.
FROM nvidia/cuda:13.0.0-devel-ubuntu24.04 AS build
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
# Fails unless CMake found CUDA (the option alone is "when present"); builds
# the GPU library next to the binaries so a broken CUDA build stops here.
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTFJOB_NATIVE=OFF -DTFJOB_CUDA=ON \
 && grep -q '^TFJOB_NCCL_LIBRARY:.*nccl' build/CMakeCache.txt \
 && cmake --build build --target tfjob_gpu tfjob-runtime tfjob custom_training_loop \
 && mkdir -p /out \
 && for b in tfjob-runtime tfjob custom_training_loop; do ldd "build/bin/$b"; done \
    | awk '$3 ~ /^\// {print $3}' | sort -u \
    | xargs -r -n1 sh -c 'dpkg -S "$0" 2>/dev/null || dpkg -S "$(readlink -f "$0")"' \
    | cut -d: -f1 | sort -u > /out/runtime-packages.txt

# ---- runtime: Ubuntu's library package names differ from Debian's (t64
# suffixes), so the list is derived from ldd in the build stage rather than
# written out: exactly the packages that own the shared libraries the binaries
# load, installed with the same versions (same Ubuntu release).
FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
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
