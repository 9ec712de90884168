"""PyTorch peer for the MLP throughput benchmarks (mlp_vs_torch.sh on the
CPU, gpu_train.sh with --device cuda and wider --hidden layers).

The same model (784-128-10, ReLU), loss (cross-entropy on logits, which is what
Keras computes for softmax + sparse categorical cross-entropy), optimizer
(Adam lr 1e-3, Keras' epsilon 1e-7), batch size, data (MNIST images 0..7999,
pixels in [0, 1]), shuffling per epoch and thread count as tfjob-runtime's
examples/mnist/mlp.json. Prints one JSON line: examples_per_second over the
training loop only (data loading and evaluation excluded, as in tfjob's
summary), and the eval accuracy on images 8000..9999 as a sanity check.

On a GPU (--device cuda) each batch is copied from pinned host memory with a
non-blocking copy, as tfjob-runtime uploads its batches, nothing reads the
loss inside an epoch, and the clock stops after torch.cuda.synchronize() at
the end of each epoch: the same work, overlapped the same way, as tfjob's
chunk of steps that ends when the device is done.

Run with Debian's interpreter (/usr/bin/python3), which sees python3-torch, or
with any interpreter whose torch has CUDA for --device cuda.
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
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--hidden", default="128", help="hidden layer widths, comma-separated")
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch: no CUDA device")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    images = load_idx(f"{args.data_dir}/t10k-images-idx3-ubyte.gz", 0x803).astype(np.float32) / 255.0
    labels = load_idx(f"{args.data_dir}/t10k-labels-idx1-ubyte.gz", 0x801).astype(np.int64)
    x_train = torch.from_numpy(images[:8000].reshape(8000, 784).copy())
    y_train = torch.from_numpy(labels[:8000].copy())
    x_eval = torch.from_numpy(images[8000:].reshape(2000, 784).copy())
    y_eval = torch.from_numpy(labels[8000:].copy())

    layers, width = [], 784
    for h in [int(w) for w in args.hidden.split(",") if w]:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    if dev.type == "cuda":
        x_train, y_train = x_train.pin_memory(), y_train.pin_memory()
        x_eval, y_eval = x_eval.to(dev), y_eval.to(dev)
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
            if dev.type == "cuda":
                xb, yb = xb.pin_memory().to(dev, non_blocking=True), yb.pin_memory().to(dev, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            examples += xb.shape[0]
        if dev.type == "cuda":
            torch.cuda.synchronize()
        train_seconds += time.perf_counter() - t0

    with torch.no_grad():
        accuracy = (model(x_eval).argmax(1) == y_eval).float().mean().item()
    print(json.dumps({
        "peer": f"pytorch {torch.__version__}" + (f" on {torch.cuda.get_device_name(dev)}" if dev.type == "cuda" else ""),
        "threads": args.threads,
        "examples": examples,
        "train_seconds": train_seconds,
        "examples_per_second": examples / train_seconds,
        "eval_accuracy": accuracy,
    }))


if __name__ == "__main__":
    main()
