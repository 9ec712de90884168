"""MNIST's IDX files (gzip), as the PyTorch peers read them (imported by
torch_cnn.py, torch_mlp.py and torch_keras.py, which Python finds beside
them)."""
import gzip

import numpy as np


def load_idx(path, magic):
    """The array in a gzip'd IDX file, after checking its magic number."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    got = int.from_bytes(data[0:4], "big")
    if got != magic:
        raise SystemExit(f"{path}: bad magic {got:#010x}, expected {magic:#010x}")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
