#!/usr/bin/env bash
# crds/kubeflow.org_tfjobs.yaml and the chart's copy are exactly what
# tools/gen_crd_schema.py generates from the API server of the Kubernetes 1.26
# control plane in ../shared/envtest (or $TFJOB_ENVTEST): a hand edit of
# either file, or a change to the generator or its template that was not
# regenerated, fails here. Always the kit's API server, never
# $KUBEBUILDER_ASSETS: the bytes depend on the Kubernetes version.
# Env: PYTHON (default /usr/bin/python3), ENVTEST_BIN_DIR (the kit's
# decompressed binaries, shared with the C++ tests).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kit=${TFJOB_ENVTEST:-$root/../shared/envtest}
if [[ ! -x $kit/start-control-plane.sh ]]; then
  echo "regen_test: no envtest kit at $kit (../shared/envtest beside the checkout, or set TFJOB_ENVTEST)" >&2
  exit 1
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/tfjob-crd-regen.XXXXXX")
trap '"$kit/stop-control-plane.sh" "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
bash "$root/tests/support/control-plane-up.sh" "$kit" "$dir"
kubectl=$root/.tools/bin/kubectl
[[ -x $kubectl ]] || kubectl=${ENVTEST_BIN_DIR:-$dir/bin}/kubectl
"${PYTHON:-/usr/bin/python3}" "$root/tools/gen_crd_schema.py" --kubeconfig "$dir/admin.kubeconfig" \
  --kubectl "$kubectl" --check
