#!/bin/sh
# The runtime images' ENTRYPOINT. `IMAGE tfjob run MANIFEST`, `IMAGE
# custom_training_loop ...` and `IMAGE tfjob-runtime ...` run that program of
# the image; anything else is tfjob-runtime's command line (`IMAGE fit
# --config ...`, or a TFJob container that gives args and no command). A
# container with a command of its own (as the manifests in examples/ have)
# does not pass through here.
case "${1:-}" in
  tfjob | tfjob-runtime | custom_training_loop)
    program=$1
    shift
    exec "/usr/local/bin/$program" "$@"
    ;;
esac
exec /usr/local/bin/tfjob-runtime "$@"
