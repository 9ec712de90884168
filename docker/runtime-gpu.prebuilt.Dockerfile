# tfjob/runtime-gpu:0.1.0 from binaries already built on the host with CUDA,
# for CI and scripts/images.sh, which stages the context (BUILD/images/context:
# build/bin/ with stripped binaries, examples/ and docker/, laid out as the
# repository, and cuda/). No registry is needed: on Debian bookworm, with
# runtime-cpu's packages (docker/tests checks they stay the same), and in
# cuda/ the libraries of the CUDA toolkit that compiled tfjob-runtime, as ldd
# finds them on the build machine (CUDA runtime, cuBLAS, cuBLASLt, NCCL;
# scripts/images.sh copies exactly those). The NVIDIA driver (libcuda) comes
# from the node, through NVIDIA's container toolkit, as with NVIDIA's images.
# The binaries are the host build's: with -march=native they run only on CPUs
# like the build machine's (`scripts/images.sh --portable` for distribution).
#   scripts/images.sh runtime-gpu
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libyaml-cpp0.7 libcpp-httplib0.11 libprometheus-cpp-core1.0 libcpprest2.10 \
      libbrotli1 libgomp1 libssl3 zlib1g libhdf5-103-1 libtcmalloc-minimal4 libdnnl2 \
 && rm -rf /var/lib/apt/lists/*
COPY cuda/ /usr/local/cuda/lib64/
RUN echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/tfjob-cuda.conf && ldconfig
# What NVIDIA's container toolkit reads: every GPU of the pod, the compute
# libraries of the driver, and a driver new enough for this CUDA (major.minor
# of the toolkit, which scripts/images.sh passes).
ARG CUDA_VERSION=13.0
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_REQUIRE_CUDA="cuda>=${CUDA_VERSION}"
COPY build/bin/tfjob-runtime /usr/local/bin/tfjob-runtime
COPY build/bin/tfjob /usr/local/bin/tfjob
COPY build/bin/custom_training_loop /usr/local/bin/custom_training_loop
COPY examples/ /opt/tfjob/examples/
# Numeric so that runAsNonRoot can verify it without an /etc/passwd lookup.
USER 65532:65532
WORKDIR /opt/tfjob
# TFJob manifests set the command; with none the image runs the runtime
# (`IMAGE fit ...`), or one of its programs (`IMAGE tfjob run ...`).
COPY docker/runtime-entrypoint.sh /usr/local/bin/tfjob-entrypoint
ENTRYPOINT ["/usr/local/bin/tfjob-entrypoint"]
