"""An independent TFRecord writer for the tests: MNIST images [begin, end) as
tf.Example records ("image": float_list of 784 pixels in [0, 1], "label":
int64_list of one class id), written with nothing but Python's standard
library and Debian's python3-protobuf, so what the runtime reads was not
produced by the runtime's own code.

The tf.Example message classes are built at run time from a descriptor with
TensorFlow's field numbers (tensorflow/core/example/{feature,example}.proto);
the TFRecord framing and its masked CRC32C are written out here.

usage: mnist_to_tfrecord.py --data-dir DIR --out FILE --begin B --end E
                            [--compression none|gzip|zlib]
"""
import argparse
import gzip
import struct
import zlib

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def example_class():
    f = descriptor_pb2.FileDescriptorProto(name="example.proto", package="tensorflow", syntax="proto3")
    L = descriptor_pb2.FieldDescriptorProto
    for name, typ, packed in (("BytesList", L.TYPE_BYTES, False), ("FloatList", L.TYPE_FLOAT, True),
                              ("Int64List", L.TYPE_INT64, True)):
        m = f.message_type.add(name=name)
        fld = m.field.add(name="value", number=1, label=L.LABEL_REPEATED, type=typ)
        if packed:
            fld.options.packed = True
    feat = f.message_type.add(name="Feature")
    feat.oneof_decl.add(name="kind")
    for i, (name, typ) in enumerate((("bytes_list", "BytesList"), ("float_list", "FloatList"),
                                     ("int64_list", "Int64List"))):
        feat.field.add(name=name, number=i + 1, label=L.LABEL_OPTIONAL, type=L.TYPE_MESSAGE,
                       type_name=".tensorflow." + typ, oneof_index=0)
    feats = f.message_type.add(name="Features")
    entry = feats.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=L.LABEL_OPTIONAL, type=L.TYPE_STRING)
    entry.field.add(name="value", number=2, label=L.LABEL_OPTIONAL, type=L.TYPE_MESSAGE,
                    type_name=".tensorflow.Feature")
    feats.field.add(name="feature", number=1, label=L.LABEL_REPEATED, type=L.TYPE_MESSAGE,
                    type_name=".tensorflow.Features.FeatureEntry")
    ex = f.message_type.add(name="Example")
    ex.field.add(name="features", number=1, label=L.LABEL_OPTIONAL, type=L.TYPE_MESSAGE,
                 type_name=".tensorflow.Features")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.MessageFactory(pool).GetPrototype(pool.FindMessageTypeByName("tensorflow.Example"))


def crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


TABLE = crc32c_table()


def masked_crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


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
