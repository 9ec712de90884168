"""PyTorch peer for the CNN throughput benchmark (bench/cnn_vs_torch.sh).

The same model as tfjob-runtime's examples/mnist/cnn.json (Conv2D 32 3x3
valid + ReLU, 2x2 max pooling, Flatten, Dense 64 + ReLU, Dense 10 logits),
loss (cross-entropy on logits), optimizer (Adam lr 1e-3, Keras' epsilon
1e-7), batch size, data (MNIST images 0..7999, pixels in [0, 1]), per-epoch
shuffling and thread count. PyTorch is NCHW; the layout changes nothing in
the arithmetic. Prints one JSON line: examples_per_second over the training
loop only (data loading and evaluation excluded, as in tfjob's summary), and
the eval accuracy on images 8000..9999 as a sanity check.

Run with Debian's interpreter (/usr/bin/python3), which sees python3-torch.
"""
import argparse
import json
import time

import numpy as np
import torch

from mnist_idx import load_idx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    images = load_idx(f"{args.data_dir}/t10k-images-idx3-ubyte.gz", 0x803).astype(np.float32) / 255.0
    labels = load_idx(f"{args.data_dir}/t10k-labels-idx1-ubyte.gz", 0x801).astype(np.int64)
    x_train = torch.from_numpy(images[:8000].reshape(8000, 1, 28, 28).copy())
    y_train = torch.from_numpy(labels[:8000].copy())
    x_eval = torch.from_numpy(images[8000:].reshape(2000, 1, 28, 28).copy())
    y_eval = torch.from_numpy(labels[8000:].copy())

    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(13 * 13 * 32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)

    examples = 0
    train_seconds = 0.0
    for _ in range(args.epochs):
        perm = torch.randperm(8000, generator=gen)
        t0 = time.perf_counter()
        for start in range(0, 8000, args.batch_size):
            idx = perm[start:start + args.batch_size]
            xb, yb = x_train[idx], y_train[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            examples += xb.shape[0]
        train_seconds += time.perf_counter() - t0

    with torch.no_grad():
        accuracy = (model(x_eval).argmax(1) == y_eval).float().mean().item()
    print(json.dumps({
        "peer": f"pytorch {torch.__version__}",
        "threads": args.threads,
        "examples": examples,
        "train_seconds": train_seconds,
        "examples_per_second": examples / train_seconds,
        "eval_accuracy": accuracy,
    }))


if __name__ == "__main__":
    main()
