"""An independent TFRecord writer for the tests: MNIST images [begin, end) as
tf.Example records ("image": float_list of 784 pixels in [0, 1], "label":
int64_list of one class id), written with nothing but Python's standard
library and Debian's python3-protobuf, so what the runtime reads was not
produced by the runtime's own code.

The tf.Example message classes (built at run time from a descriptor with
TensorFlow's field numbers, tensorflow/core/example/{feature,example}.proto)
and the TFRecord framing with its masked CRC32C are those of
examples/keras/wide_deep/make_data.py, which writes the wide-and-deep
example's data the same way.

usage: mnist_to_tfrecord.py --data-dir DIR --out FILE --begin B --end E
                            [--compression none|gzip|zlib]
"""
import argparse
import gzip
import os
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../examples/keras/wide_deep"))
from make_data import example_class, frame  # noqa: E402


def load_idx(path, magic):
    with gzip.open(path, "rb") as f:
        data = f.read()
    if int.from_bytes(data[0:4], "big") != magic:
        raise SystemExit(f"{path}: bad magic")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return dims, data[4 + 4 * ndim:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--begin", type=int, default=0)
    ap.add_argument("--end", type=int, default=10000)
    ap.add_argument("--compression", choices=["none", "gzip", "zlib"], default="none")
    args = ap.parse_args()

    Example = example_class()
    dims, pixels = load_idx(f"{args.data_dir}/t10k-images-idx3-ubyte.gz", 0x803)
    _, labels = load_idx(f"{args.data_dir}/t10k-labels-idx1-ubyte.gz", 0x801)
    size = dims[1] * dims[2]
    out = bytearray()
    for i in range(args.begin, args.end):
        ex = Example()
        image = ex.features.feature["image"].float_list.value
        image.extend(p / 255.0 for p in pixels[i * size:(i + 1) * size])
        ex.features.feature["label"].int64_list.value.append(labels[i])
        out += frame(ex.SerializeToString())
    if args.compression == "gzip":
        out = gzip.compress(bytes(out))
    elif args.compression == "zlib":
        out = zlib.compress(bytes(out))
    with open(args.out, "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main()
