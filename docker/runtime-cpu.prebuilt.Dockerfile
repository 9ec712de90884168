# tfjob/runtime-cpu:0.1.0 from binaries already built on the host, for CI and
# scripts/images.sh, which stages the context (BUILD/images/context:
# build/bin/ with stripped binaries, examples/ and docker/, laid out as the
# repository). The final stage of runtime-cpu.Dockerfile, the same packages
# (docker/tests checks they stay the same), without the build stage. The
# runtime is tfjob-runtime-cpu, tfjob-runtime without the CUDA backend
# (services/runtime/CMakeLists.txt). The binaries are the host build's: with
# -march=native they run only on CPUs like the build machine's (use
# `scripts/images.sh --portable`, or runtime-cpu.Dockerfile, for distribution).
#   scripts/images.sh runtime-cpu
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libyaml-cpp0.7 libcpp-httplib0.11 libprometheus-cpp-core1.0 libcpprest2.10 \
      libbrotli1 libgomp1 libssl3 zlib1g libhdf5-103-1 libtcmalloc-minimal4 libdnnl2 \
 && rm -rf /var/lib/apt/lists/*
COPY build/bin/tfjob-runtime-cpu /usr/local/bin/tfjob-runtime
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
