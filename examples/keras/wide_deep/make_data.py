"""A Criteo-like click data set as TFRecord files of tf.Example records, for
examples/keras/wide_deep.json (examples/keras/README.md).

Each record has
  "dense": float_list of 13: log(1 + count), the counts heavy-tailed
           (rounded log-normal), as Criteo's I1..I13 are usually fed;
  "cat":   int64_list of 26: one id per categorical feature (Criteo's
           C1..C26). Feature f's ids are drawn from a Zipf distribution
           (exponent 1.1; rank r has weight 1/r^1.1) over a vocabulary of its
           own, sized in proportion to log(Criteo's cardinality of C_f)^2
           (82 to 11,134 ids with the default --vocab 100000); the
           vocabularies lie side by side in ONE shared id space [0, --vocab)
           (feature f's rank r is id offset_f + r - 1), so a single
           Embedding(vocab, 8) serves all 26;
  "label": float_list of 1: 0.0 or 1.0, a click.
The label comes from a hidden rule: logit = bias + a sparse linear function of
dense features 0, 2, 5 and 9 + a per-id weight (normal, sd 1.5) for each of
categorical features 1, 5, 8 and 13 + the product of dense feature 2 and
categorical feature 8's weight; label ~ Bernoulli(sigmoid(logit)). The other 9
dense and 22 categorical features are noise. The script prints the label
rate, the majority-class rate (what always guessing the majority scores) and
the accuracy of the rule itself (predict 1 where sigmoid(logit) > 0.5: the
best any model can expect, up to sampling noise), for each file.

Everything comes from Python's random module seeded with --seed, so the same
arguments write the same bytes. Written with Python's standard library and
Debian's python3-protobuf only (the tf.Example classes are built from a
descriptor with TensorFlow's field numbers; the TFRecord framing and its
masked CRC32C are written out here; services/runtime/tests/mnist_to_tfrecord.py
and bench/torch_keras.py import them from this file).

usage: make_data.py --out DIR [--seed S] [--train N] [--eval N] [--vocab V]
writes DIR/train.tfrecord and DIR/eval.tfrecord.
"""
import argparse
import bisect
import itertools
import math
import os
import random
import struct

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

NUM_DENSE = 13
NUM_CAT = 26
# Criteo-like relative vocabulary sizes of C1..C26, scaled to --vocab.
CARDINALITY = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
               14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]
ZIPF_S = 1.1
INFORMATIVE_DENSE = {0: 0.9, 2: -0.8, 5: 0.6, 9: 0.7}
INFORMATIVE_CAT = (1, 5, 8, 13)
CAT_WEIGHT_SD = 1.5
BIAS = -2.3


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


def vocab_sizes(vocab):
    """Each feature's vocabulary size (at least 3), in proportion to
    log(Criteo's cardinality) squared, summing to exactly `vocab`."""
    w = [math.log(c + 1) ** 2 for c in CARDINALITY]
    sizes = [max(3, int(vocab * x / sum(w))) for x in w]
    sizes[sizes.index(max(sizes))] += vocab - sum(sizes)
    return sizes


class Generator:
    def __init__(self, seed, vocab):
        rng = random.Random(seed)
        self.sizes = vocab_sizes(vocab)
        self.offsets = [0] + list(itertools.accumulate(self.sizes))[:-1]
        # Zipf: cumulative weights of ranks 1..n.
        self.cum = [list(itertools.accumulate(1.0 / r ** ZIPF_S for r in range(1, n + 1))) for n in self.sizes]
        # Dense counts: rounded exp(normal(mu, sigma)) per feature.
        self.dense_params = [(rng.uniform(0.0, 3.0), rng.uniform(0.5, 1.5)) for _ in range(NUM_DENSE)]
        # Centre of each informative log-count, so the rule's terms are
        # roughly zero-mean (measured on draws of the same distributions).
        self.dense_centre = {}
        probe = random.Random(seed + 1)
        for j in INFORMATIVE_DENSE:
            mu, sigma = self.dense_params[j]
            draws = [math.log1p(round(math.exp(probe.gauss(mu, sigma)))) for _ in range(20000)]
            self.dense_centre[j] = sum(draws) / len(draws)
        # The hidden per-id weights of the informative categorical features.
        self.cat_weights = {f: [rng.gauss(0.0, CAT_WEIGHT_SD) for _ in range(self.sizes[f])] for f in INFORMATIVE_CAT}

    def rows(self, n, rng):
        for _ in range(n):
            dense = [math.log1p(round(math.exp(rng.gauss(mu, sigma)))) for mu, sigma in self.dense_params]
            ranks = [bisect.bisect_left(c, rng.random() * c[-1]) for c in self.cum]  # 0-based rank
            cat = [self.offsets[f] + r for f, r in enumerate(ranks)]
            z = BIAS
            for j, a in INFORMATIVE_DENSE.items():
                z += a * (dense[j] - self.dense_centre[j])
            for f in INFORMATIVE_CAT:
                z += self.cat_weights[f][ranks[f]]
            z += 0.5 * (dense[2] - self.dense_centre[2]) * self.cat_weights[8][ranks[8]]
            p = 1.0 / (1.0 + math.exp(-z))
            label = 1.0 if rng.random() < p else 0.0
            yield dense, cat, label, p


def write(path, gen, n, rng, Example):
    out = bytearray()
    positives = 0
    rule_right = 0
    for dense, cat, label, p in gen.rows(n, rng):
        ex = Example()
        ex.features.feature["dense"].float_list.value.extend(dense)
        ex.features.feature["cat"].int64_list.value.extend(cat)
        ex.features.feature["label"].float_list.value.append(label)
        out += frame(ex.SerializeToString(deterministic=True))
        positives += label == 1.0
        rule_right += (p > 0.5) == (label == 1.0)
    with open(path, "wb") as f:
        f.write(out)
    rate = positives / n
    print(f"{path}: {n} examples, label rate {rate:.4f}, majority-class rate {max(rate, 1 - rate):.4f}, "
          f"the hidden rule's accuracy {rule_right / n:.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for train.tfrecord and eval.tfrecord")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train", type=int, default=100000, help="training examples")
    ap.add_argument("--eval", type=int, default=10000, help="evaluation examples")
    ap.add_argument("--vocab", type=int, default=100000, help="size of the shared categorical id space")
    args = ap.parse_args()
    if args.vocab < 3 * NUM_CAT:
        raise SystemExit(f"--vocab must be at least {3 * NUM_CAT}")

    Example = example_class()
    gen = Generator(args.seed, args.vocab)
    os.makedirs(args.out, exist_ok=True)
    print(f"make_data: {NUM_DENSE} dense features, {NUM_CAT} categorical features in one id space of "
          f"{args.vocab} (vocabularies {min(gen.sizes)}..{max(gen.sizes)}), seed {args.seed}")
    write(os.path.join(args.out, "train.tfrecord"), gen, args.train, random.Random(args.seed * 1000003 + 1), Example)
    write(os.path.join(args.out, "eval.tfrecord"), gen, args.eval, random.Random(args.seed * 1000003 + 2), Example)


if __name__ == "__main__":
    main()
