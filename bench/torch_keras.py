"""PyTorch peers for bench/keras_vs_torch.sh: the two Keras Functional
examples of examples/keras, built the same way in PyTorch.

  residual_cnn  examples/keras/residual_cnn.json: stem Conv2D(16, 3x3,
                stride 2, same, no bias) + BatchNormalization + ReLU, two
                residual blocks (16 then 32 channels, the second after a
                stride-2 Conv2D + BN + ReLU), each Conv-BN-ReLU-Conv-BN, Add,
                ReLU; GlobalAveragePooling2D; Dense(10). Adam 1e-3 (Keras'
                epsilon 1e-7), batch 64, MNIST t10k images 0..7999 (pixels in
                [0, 1]), evaluated on 8000..9999. TensorFlow's "same" padding
                at stride 2 pads one row and column at the bottom and right;
                so does this. BatchNorm momentum 0.01 is Keras' 0.99.
  wide_deep     examples/keras/wide_deep.json: Embedding(100000, 8) on the
                26 ids, Flatten, Concatenate with the 13 dense features,
                LayerNormalization (epsilon 1e-3), Dense 64 relu, Dense 32
                relu, Dense 1; wide Dense 1 on the dense features; Add,
                sigmoid; binary cross-entropy; Adam 1e-3 (epsilon 1e-7):
                SparseAdam on the embedding's sparse gradient (the lazy
                rule, as the runtime updates an Embedding's rows), Adam on
                the rest, batch 256,
                on make_data.py's TFRecord files (read here with its
                tf.Example class).

  vgg_cnn       bench/vgg_cnn.json (a runtime job, not Keras JSON): VGG-style
                3x3 convolutions, "same" padding, ReLU: 32, 32, max pooling
                2x2, 64, 64, max pooling, Flatten, Dense(10). Adam 1e-3
                (epsilon 1e-7), batch 64, the residual CNN's MNIST split.
                Its 32- and 64-channel layers are where the runtime takes
                oneDNN's Winograd kernels.

  mnist_lstm    examples/keras/mnist_lstm.json: LSTM(128) over the 28
                rows of 28 pixels (sigmoid gates: torch.nn.LSTM's; its two
                biases are Keras' one), Dense(10). Adam 1e-3 (epsilon 1e-7),
                batch 64, the residual CNN's MNIST split.

One thread unless --threads; per-epoch shuffling. Prints one JSON line:
examples_per_second over the training loop only (data loading and
evaluation excluded, as in tfjob's summary) and eval_accuracy as a sanity
check. Run with Debian's interpreter (/usr/bin/python3), which sees
python3-torch.
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from mnist_idx import load_idx


class ConvBn(torch.nn.Module):
    """Conv2D (no bias, TF "same" padding) + BatchNormalization."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        self.conv = torch.nn.Conv2d(cin, cout, 3, stride=stride, padding=1 if stride == 1 else 0, bias=False)
        self.bn = torch.nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)

    def forward(self, x):
        if self.stride == 2:
            x = F.pad(x, (0, 1, 0, 1))  # TF: the odd padding row/column at the bottom/right
        return self.bn(self.conv(x))


class ResidualCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = ConvBn(1, 16, 2)
        self.b1a, self.b1b = ConvBn(16, 16, 1), ConvBn(16, 16, 1)
        self.down = ConvBn(16, 32, 2)
        self.b2a, self.b2b = ConvBn(32, 32, 1), ConvBn(32, 32, 1)
        self.classifier = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = F.relu(x + self.b1b(F.relu(self.b1a(x))))
        x = F.relu(self.down(x))
        x = F.relu(x + self.b2b(F.relu(self.b2a(x))))
        return self.classifier(x.mean(dim=(2, 3)))  # logits; the loss applies the softmax


class WideDeep(torch.nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, 8, sparse=True)
        torch.nn.init.uniform_(self.embedding.weight, -0.05, 0.05)  # Keras' default
        self.norm = torch.nn.LayerNorm(26 * 8 + 13, eps=1e-3)
        self.deep1, self.deep2, self.deep_out = (torch.nn.Linear(221, 64), torch.nn.Linear(64, 32),
                                                 torch.nn.Linear(32, 1))
        self.wide = torch.nn.Linear(13, 1)

    def forward(self, dense, cat):
        deep = torch.cat([self.embedding(cat).flatten(1), dense], dim=1)
        deep = F.relu(self.deep2(F.relu(self.deep1(self.norm(deep)))))
        return (self.wide(dense) + self.deep_out(deep)).squeeze(1)  # the logit; the loss applies the sigmoid


def read_tfrecord(path, Example):
    dense, cat, label = [], [], []
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        ex = Example()
        ex.ParseFromString(data[at + 12:at + 12 + n])
        feature = ex.features.feature
        dense.append(list(feature["dense"].float_list.value))
        cat.append(list(feature["cat"].int64_list.value))
        label.append(feature["label"].float_list.value[0])
        at += 12 + n + 4
    return (torch.tensor(dense, dtype=torch.float32), torch.tensor(cat, dtype=torch.int64),
            torch.tensor(label, dtype=torch.float32))


class VggCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = torch.nn.ModuleList(
            torch.nn.Conv2d(cin, cout, 3, padding=1) for cin, cout in ((1, 32), (32, 32), (32, 64), (64, 64)))
        self.out = torch.nn.Linear(7 * 7 * 64, 10)

    def forward(self, x):
        for i, conv in enumerate(self.convs):
            x = F.relu(conv(x))
            if i % 2 == 1:
                x = F.max_pool2d(x, 2)
        # Keras flattens NHWC: the same features in another order, which a
        # freshly initialised Dense does not tell apart.
        return self.out(x.flatten(1))


class MnistLstm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(28, 128, batch_first=True)
        self.out = torch.nn.Linear(128, 10)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.out(h[-1])


class Optimizers:
    """Several optimizers stepped as one (SparseAdam takes only sparse gradients, Adam only dense ones)."""

    def __init__(self, *opts):
        self.opts = opts

    def zero_grad(self, set_to_none=True):
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)

    def step(self):
        for o in self.opts:
            o.step()


def train(model, opt, loss_fn, inputs, labels, batch, epochs, gen):
    n = labels.shape[0]
    examples, seconds = 0, 0.0
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            idx = perm[start:start + batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(*[x[idx] for x in inputs]), labels[idx])
            loss.backward()
            opt.step()
            examples += idx.shape[0]
        seconds += time.perf_counter() - t0
    return examples, seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["residual_cnn", "wide_deep", "mnist_lstm", "vgg_cnn"])
    ap.add_argument("--data-dir", required=True, help="MNIST (residual_cnn, mnist_lstm, vgg_cnn) or make_data.py's output (wide_deep)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    if args.model in ("residual_cnn", "mnist_lstm", "vgg_cnn"):
        images = load_idx(f"{args.data_dir}/t10k-images-idx3-ubyte.gz", 0x803).astype(np.float32) / 255.0
        labels = load_idx(f"{args.data_dir}/t10k-labels-idx1-ubyte.gz", 0x801).astype(np.int64)
        shape = (10000, 28, 28) if args.model == "mnist_lstm" else (10000, 1, 28, 28)
        x = torch.from_numpy(images.reshape(shape).copy())
        y = torch.from_numpy(labels.copy())
        model = {"residual_cnn": ResidualCnn, "mnist_lstm": MnistLstm, "vgg_cnn": VggCnn}[args.model]()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
        examples, seconds = train(model, opt, torch.nn.CrossEntropyLoss(), [x[:8000]], y[:8000], 64, args.epochs,
                                  gen)
        model.eval()
        with torch.no_grad():
            accuracy = (model(x[8000:]).argmax(1) == y[8000:]).float().mean().item()
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../examples/keras/wide_deep"))
        import make_data  # noqa: E402 (its tf.Example class)
        Example = make_data.example_class()
        train_set = read_tfrecord(os.path.join(args.data_dir, "train.tfrecord"), Example)
        eval_set = read_tfrecord(os.path.join(args.data_dir, "eval.tfrecord"), Example)
        model = WideDeep(100000)
        dense_params = [p for n, p in model.named_parameters() if not n.startswith("embedding.")]
        opt = Optimizers(torch.optim.SparseAdam([model.embedding.weight], lr=1e-3, eps=1e-7),
                         torch.optim.Adam(dense_params, lr=1e-3, eps=1e-7))
        examples, seconds = train(model, opt, torch.nn.BCEWithLogitsLoss(), list(train_set[:2]), train_set[2], 256,
                                  args.epochs, gen)
        model.eval()
        with torch.no_grad():
            accuracy = ((model(*eval_set[:2]) > 0).float() == eval_set[2]).float().mean().item()
    print(json.dumps({
        "peer": f"pytorch {torch.__version__}",
        "threads": args.threads,
        "examples": examples,
        "train_seconds": seconds,
        "examples_per_second": examples / seconds,
        "eval_accuracy": accuracy,
    }))


if __name__ == "__main__":
    main()
