#!/usr/bin/python3
"""Golden values for services/model's optimizers, losses and one training step
of the MNIST MLP, computed by an implementation that shares no code or
formulas with the C++ one: PyTorch (Debian's python3-torch), its torch.optim
optimizers, its loss functions and its autograd.

Run from anywhere, offline:

    /usr/bin/python3 tests/goldens/make_goldens.py [--check]

It writes services/model/tests/data/{optimizer,loss,mlp_step}_goldens.json,
byte for byte the same on every run (fixed inputs, float64, one thread,
numbers printed to 9 significant digits so that a last-bit difference in a
BLAS kernel cannot change the file). --check compares instead of writing and
exits 1 when a file would change. The C++ tests
(services/model/tests/golden_test.cc) read these files.

Keras 3 and PyTorch define some optimizers differently. Where a mapping of
the hyperparameters makes PyTorch compute exactly Keras's update, the script
applies it; otherwise the golden uses the setting where both definitions
agree, and the C++ test states the difference and checks it separately:

  SGD      Keras keeps m = momentum*m - lr*g; PyTorch keeps b = momentum*b + g
           and steps by lr*b (nesterov: lr*(g + momentum*b)). Same updates;
           Keras's slot is -lr * b.
  Adagrad  Keras: w -= lr*g / sqrt(a + eps), a starting at
           initial_accumulator_value. PyTorch: lr*g / (sqrt(a) + eps). Mapped
           exactly: PyTorch runs with eps = 0 and initial_accumulator_value =
           Keras's initial_accumulator_value + eps; Keras's slot is a - eps.
  RMSprop  Keras puts epsilon inside the square root, PyTorch outside; no
           hyperparameter maps one onto the other, so the goldens use
           epsilon = 0, where they agree (golden_test.cc checks where Keras
           puts it). Momentum: Keras m = momentum*m + lr*g/den, w -= m;
           PyTorch b = momentum*b + g/den, w -= lr*b: same updates, Keras's
           slot is lr * b.
  Adam     Keras's epsilon is Kingma and Ba's "epsilon hat": w -= alpha*m /
           (sqrt(v) + eps) with alpha = lr*sqrt(1-b2^t)/(1-b1^t). PyTorch's
           Adam divides by sqrt(v)/sqrt(1-b2^t) + eps. Mapped exactly by
           setting PyTorch's eps at step t to eps / sqrt(1 - b2^t). Sparse
           (lazy) Adam is torch.optim.SparseAdam, whose epsilon already is
           epsilon hat.

Losses (reduction "sum_over_batch_size"): PyTorch's mse_loss,
binary_cross_entropy(_with_logits) and cross_entropy compute the values and
autograd the gradients with respect to the predictions. Keras's handling of
probabilities (cross-entropies normalise each row to sum to one, then clip to
[1e-7, 1 - 1e-7] in float32) is applied to the input before PyTorch's loss.
"""

import argparse
import gzip
import math
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    sys.exit("make_goldens: %s; run it with /usr/bin/python3 and Debian's python3-torch "
             "(scripts/setup.sh installs it)" % e)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(ROOT, "services", "model", "tests", "data")
MNIST_IMAGES = os.path.join(ROOT, "..", "shared", "data", "mnist", "t10k-images-idx3-ubyte.gz")
MNIST_LABELS = os.path.join(ROOT, "..", "shared", "data", "mnist", "t10k-labels-idx1-ubyte.gz")

# Keras's epsilon() as float32 sees it, and 1 - epsilon in float32.
EPS32 = float(np.float32(1e-7))
ONE_MINUS_EPS32 = float(np.float32(1.0) - np.float32(1e-7))

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)


# ----------------------------------------------------------------- emitting

def fmt_number(x):
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    x = float(x)
    if not math.isfinite(x):
        raise ValueError("non-finite golden value %r" % x)
    s = "%.9g" % x
    return "0" if s == "-0" else s


def emit(obj, indent=0):
    """JSON with one short line per list of numbers (wrapped at 8 numbers)."""
    pad = " " * indent
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [pad + "  " + _json_str(k) + ": " + emit(v, indent + 2) for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple, str)) for v in obj):
            nums = [fmt_number(v) for v in obj]
            if len(nums) <= 8:
                return "[" + ", ".join(nums) + "]"
            lines = [", ".join(nums[i:i + 8]) for i in range(0, len(nums), 8)]
            return "[\n" + ",\n".join(pad + "  " + l for l in lines) + "\n" + pad + "]"
        return "[\n" + ",\n".join(pad + "  " + emit(v, indent + 2) for v in obj) + "\n" + pad + "]"
    if isinstance(obj, str):
        return _json_str(obj)
    return fmt_number(obj)


def _json_str(s):
    import json
    return json.dumps(s)


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def f32_uniform(rng, n, lo, hi):
    """n float32-representable values, as Python floats."""
    return [float(v) for v in rng.uniform(lo, hi, n).astype(np.float32)]


# --------------------------------------------------------------- optimizers

KERAS_DEFAULTS = {
    "SGD": {"learning_rate": 0.01, "momentum": 0.0, "nesterov": False},
    "Adagrad": {"learning_rate": 0.001, "initial_accumulator_value": 0.1, "epsilon": 1e-7},
    "RMSprop": {"learning_rate": 0.001, "rho": 0.9, "momentum": 0.0, "epsilon": 1e-7, "centered": False},
    "Adam": {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "amsgrad": False},
}


def keras_hparams(opt):
    h = dict(KERAS_DEFAULTS[opt["type"]])
    h.update({k: v for k, v in opt.items() if k != "type"})
    return h


class TorchAsKeras:
    """A torch.optim optimizer for one parameter, configured so that its
    updates are Keras's, with Keras's slots read back from its state."""

    def __init__(self, opt, param, sparse):
        self.type = opt["type"]
        self.h = keras_hparams(opt)
        self.p = param
        self.t = 0
        h = self.h
        if self.type == "SGD":
            assert not sparse
            self.o = torch.optim.SGD([param], lr=h["learning_rate"], momentum=h["momentum"], nesterov=h["nesterov"])
        elif self.type == "Adagrad":
            self.o = torch.optim.Adagrad([param], lr=h["learning_rate"], eps=0.0,
                                         initial_accumulator_value=h["initial_accumulator_value"] + h["epsilon"])
        elif self.type == "RMSprop":
            assert not sparse
            if h["epsilon"] != 0:
                raise ValueError("RMSprop: Keras's epsilon sits inside the square root, PyTorch's outside; "
                                 "goldens exist for epsilon = 0 only")
            self.o = torch.optim.RMSprop([param], lr=h["learning_rate"], alpha=h["rho"], eps=0.0,
                                         momentum=h["momentum"], centered=h["centered"])
        elif self.type == "Adam":
            betas = (h["beta_1"], h["beta_2"])
            if sparse:
                assert not h["amsgrad"]
                self.o = torch.optim.SparseAdam([param], lr=h["learning_rate"], betas=betas, eps=h["epsilon"])
            else:
                self.o = torch.optim.Adam([param], lr=h["learning_rate"], betas=betas, eps=h["epsilon"],
                                          amsgrad=h["amsgrad"])
        else:
            raise ValueError(self.type)
        self.sparse = sparse

    def step(self, grad):
        self.t += 1
        if self.type == "Adam" and not self.sparse:
            # Keras's epsilon hat: see the module docstring.
            self.o.param_groups[0]["eps"] = self.h["epsilon"] / math.sqrt(1.0 - self.h["beta_2"] ** self.t)
        self.p.grad = grad
        self.o.step()
        self.p.grad = None

    def slots(self):
        """Keras's slot variables, in Keras's names."""
        st = self.o.state[self.p]
        h = self.h
        if self.type == "SGD":
            if h["momentum"] == 0:
                return {}
            return {"momentum": flat(-h["learning_rate"] * st["momentum_buffer"])}
        if self.type == "Adagrad":
            return {"accumulator": flat(st["sum"] - h["epsilon"])}
        if self.type == "RMSprop":
            s = {"velocity": flat(st["square_avg"])}
            if h["momentum"] > 0:
                s["momentum"] = flat(h["learning_rate"] * st["momentum_buffer"])
            if h["centered"]:
                s["average_gradient"] = flat(st["grad_avg"])
            return s
        if self.type == "Adam":
            s = {"momentum": flat(st["exp_avg"]), "velocity": flat(st["exp_avg_sq"])}
            if h.get("amsgrad"):
                s["velocity_hat"] = flat(st["max_exp_avg_sq"])
            return s
        raise ValueError(self.type)


DENSE_OPTIMIZERS = [
    ("sgd", {"type": "SGD", "learning_rate": 0.1}),
    ("sgd_keras_defaults", {"type": "SGD"}),
    ("sgd_momentum", {"type": "SGD", "learning_rate": 0.1, "momentum": 0.9}),
    ("sgd_nesterov", {"type": "SGD", "learning_rate": 0.1, "momentum": 0.9, "nesterov": True}),
    ("sgd_nesterov_0.5", {"type": "SGD", "learning_rate": 0.05, "momentum": 0.5, "nesterov": True}),
    ("adagrad", {"type": "Adagrad", "learning_rate": 0.1}),
    ("adagrad_custom", {"type": "Adagrad", "learning_rate": 0.05, "initial_accumulator_value": 0.5,
                        "epsilon": 1e-3}),
    ("adagrad_keras_defaults", {"type": "Adagrad"}),
    ("rmsprop", {"type": "RMSprop", "learning_rate": 0.01, "epsilon": 0}),
    ("rmsprop_rho", {"type": "RMSprop", "learning_rate": 0.01, "rho": 0.8, "epsilon": 0}),
    ("rmsprop_momentum", {"type": "RMSprop", "learning_rate": 0.01, "rho": 0.8, "momentum": 0.5, "epsilon": 0}),
    ("rmsprop_centered", {"type": "RMSprop", "learning_rate": 0.01, "centered": True, "epsilon": 0}),
    ("rmsprop_centered_momentum", {"type": "RMSprop", "learning_rate": 0.01, "rho": 0.8, "momentum": 0.7,
                                   "centered": True, "epsilon": 0}),
    ("adam", {"type": "Adam", "learning_rate": 0.01}),
    ("adam_custom", {"type": "Adam", "learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.9, "epsilon": 1e-3}),
    ("adam_amsgrad", {"type": "Adam", "learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.9, "amsgrad": True}),
    ("adam_keras_defaults", {"type": "Adam"}),
    ("adam_amsgrad_keras_defaults", {"type": "Adam", "amsgrad": True}),
]

SPARSE_OPTIMIZERS = [
    ("adagrad_sparse", {"type": "Adagrad", "learning_rate": 0.1}),
    ("adam_sparse", {"type": "Adam", "learning_rate": 0.01, "beta_2": 0.9}),
]


def optimizer_goldens():
    rng = np.random.RandomState(16)
    cases = []
    shape = [2, 3]
    for name, opt in DENSE_OPTIMIZERS:
        w0 = f32_uniform(rng, 6, -1, 1)
        # A large first gradient, then smaller ones of mixed sign (so Adam's v
        # decreases and amsgrad's maximum matters), then a larger one.
        grads = [f32_uniform(rng, 6, lo, hi) for lo, hi in [(-3, 3), (-0.3, 0.3), (-0.2, 0.2), (-1, 1), (-0.1, 0.1)]]
        p = torch.tensor(w0).reshape(shape).requires_grad_(False)
        t = TorchAsKeras(opt, p, sparse=False)
        steps = []
        for g in grads:
            t.step(torch.tensor(g).reshape(shape))
            steps.append({"gradient": g, "weights": flat(p), "slots": t.slots()})
        cases.append({"name": name, "optimizer": opt, "shape": shape, "initial": w0, "steps": steps})

    rows, width = 5, 2
    row_sets = [[3, 1], [1, 4, 1], [0, 3, 0, 0], [2], [4, 0]]
    for name, opt in SPARSE_OPTIMIZERS:
        w0 = f32_uniform(rng, rows * width, -1, 1)
        p = torch.tensor(w0).reshape(rows, width)
        t = TorchAsKeras(opt, p, sparse=True)
        steps = []
        for ids in row_sets:
            vals = f32_uniform(rng, len(ids) * width, -1.5, 1.5)
            g = torch.sparse_coo_tensor(torch.tensor([ids]), torch.tensor(vals).reshape(len(ids), width),
                                        (rows, width))
            t.step(g)
            steps.append({"indices": ids, "values": vals, "weights": flat(p), "slots": t.slots()})
        cases.append({"name": name, "optimizer": opt, "shape": [rows, width], "initial": w0, "steps": steps})

    # What PyTorch's RMSprop does with epsilon outside the root, for the test
    # that shows the two placements really differ at this epsilon.
    rms_eps = 0.05
    w0 = f32_uniform(rng, 4, -1, 1)
    g = f32_uniform(rng, 4, -0.2, 0.2)
    p = torch.tensor(w0)
    o = torch.optim.RMSprop([p], lr=0.01, alpha=0.9, eps=rms_eps)
    p.grad = torch.tensor(g)
    o.step()
    rmsprop_torch_epsilon = {"optimizer": {"type": "RMSprop", "learning_rate": 0.01, "rho": 0.9, "epsilon": rms_eps},
                             "initial": w0, "gradient": g, "torch_weights": flat(p)}

    return {
        "generator": "tests/goldens/make_goldens.py (torch.optim, float64)",
        "cases": cases,
        "rmsprop_torch_epsilon": rmsprop_torch_epsilon,
    }


# ------------------------------------------------------------------- losses

def keras_probabilities(p, normalise):
    """What Keras does to probabilities before the logarithm (float32 bounds)."""
    if normalise:
        p = p / p.sum(dim=-1, keepdim=True)
    return p.clamp(EPS32, ONE_MINUS_EPS32)


def loss_case(name, loss, pred_shape, pred, labels, label_shape, label_dtype):
    x = torch.tensor(pred).reshape(pred_shape).requires_grad_(True)
    y = torch.tensor(labels, dtype=torch.float64).reshape(label_shape)
    spec = loss if isinstance(loss, dict) else {"type": loss}
    kind = spec["type"]
    logits = spec.get("from_logits", False)
    if kind == "MeanSquaredError":
        value = F.mse_loss(x, y)
    elif kind == "BinaryCrossentropy":
        if logits:
            value = F.binary_cross_entropy_with_logits(x, y)
        else:
            value = F.binary_cross_entropy(keras_probabilities(x, False), y)
    elif kind == "SparseCategoricalCrossentropy":
        ids = y.to(torch.int64)
        if logits:
            value = F.cross_entropy(x, ids)
        else:
            value = F.nll_loss(torch.log(keras_probabilities(x, True)), ids)
    elif kind == "CategoricalCrossentropy":
        if logits:
            value = F.cross_entropy(x, y)  # probability targets
        else:
            value = -(y * torch.log(keras_probabilities(x, True))).sum(dim=-1).mean()
    else:
        raise ValueError(kind)
    value.backward()
    return {"name": name, "loss": spec,
            "predictions": {"shape": pred_shape, "values": pred},
            "labels": {"dtype": label_dtype, "shape": label_shape, "values": labels},
            "value": float(value), "gradient": flat(x.grad)}


def loss_goldens():
    rng = np.random.RandomState(17)
    cases = []
    B, C = 4, 3
    cases.append(loss_case("mse", "MeanSquaredError", [B, C], f32_uniform(rng, B * C, -2, 2),
                           f32_uniform(rng, B * C, -2, 2), [B, C], "float32"))
    cases.append(loss_case("mse_rank1_int_labels", "MeanSquaredError", [5], f32_uniform(rng, 5, -2, 4),
                           [0, 1, 3, 2, 1], [5], "int64"))
    bce_labels = [float(v) for v in rng.randint(0, 2, B * C)]
    bce_labels[1] = 0.25  # Keras accepts soft binary labels
    cases.append(loss_case("bce_logits", {"type": "BinaryCrossentropy", "from_logits": True}, [B, C],
                           f32_uniform(rng, B * C, -5, 5), bce_labels, [B, C], "float32"))
    cases.append(loss_case("bce_probabilities", "BinaryCrossentropy", [B, C], f32_uniform(rng, B * C, 0.02, 0.98),
                           bce_labels, [B, C], "float32"))
    # Probabilities at and beyond Keras's clipping bounds.
    cases.append(loss_case("bce_probabilities_clipped", "BinaryCrossentropy", [6],
                           [0.0, 1.0, 1e-9, 1.0, 0.0, 0.5], [1.0, 0.0, 1.0, 1.0, 0.0, 1.0], [6], "float32"))
    B, C = 5, 4
    ids = [float(v) for v in rng.randint(0, C, B)]
    cases.append(loss_case("sparse_cce_logits", {"type": "SparseCategoricalCrossentropy", "from_logits": True},
                           [B, C], f32_uniform(rng, B * C, -4, 4), [int(v) for v in ids], [B], "int64"))
    # Rows that do not sum to one: Keras normalises them.
    cases.append(loss_case("sparse_cce_probabilities", "SparseCategoricalCrossentropy", [B, C],
                           f32_uniform(rng, B * C, 0.05, 0.6), ids, [B], "float32"))
    cases.append(loss_case("sparse_cce_probabilities_clipped", "SparseCategoricalCrossentropy", [2, 3],
                           [0.0, 0.5, 0.5, 0.2, 0.3, 0.5], [0.0, 2.0], [2], "float32"))
    soft = rng.uniform(0, 1, (B, C))
    soft = (soft / soft.sum(axis=1, keepdims=True)).astype(np.float32)
    soft_labels = [float(v) for v in soft.reshape(-1)]
    onehot = [0.0] * (B * C)
    for b in range(B):
        onehot[b * C + int(ids[b])] = 1.0
    cases.append(loss_case("cce_logits_soft_labels", {"type": "CategoricalCrossentropy", "from_logits": True},
                           [B, C], f32_uniform(rng, B * C, -4, 4), soft_labels, [B, C], "float32"))
    cases.append(loss_case("cce_logits_one_hot", {"type": "CategoricalCrossentropy", "from_logits": True},
                           [B, C], f32_uniform(rng, B * C, -4, 4), onehot, [B, C], "float32"))
    cases.append(loss_case("cce_probabilities_soft_labels", "CategoricalCrossentropy", [B, C],
                           f32_uniform(rng, B * C, 0.05, 0.6), soft_labels, [B, C], "float32"))
    return {"generator": "tests/goldens/make_goldens.py (torch.nn.functional + autograd, float64)",
            "epsilon_bounds": [EPS32, ONE_MINUS_EPS32], "cases": cases}


# ---------------------------------------------------------- MLP train step

# Fixed weights: w = ((i * a + j * b + c) mod m - (m - 1) / 2) / d for a kernel
# element [i, j] (a bias is a kernel with one row), exact in float32, so the
# C++ test builds the very same values from these parameters.
WEIGHT_RECIPES = [
    {"name": "dense/kernel", "shape": [784, 128], "a": 40503, "b": 7919, "c": 11, "m": 1021, "d": 8192},
    {"name": "dense/bias", "shape": [128], "a": 0, "b": 97, "c": 5, "m": 41, "d": 256},
    {"name": "dense_1/kernel", "shape": [128, 10], "a": 3571, "b": 2003, "c": 3, "m": 509, "d": 1024},
    {"name": "dense_1/bias", "shape": [10], "a": 0, "b": 13, "c": 2, "m": 17, "d": 64},
]
BATCH = 8
SAMPLE_EVERY = 97  # flat indices 0, 97, 194, ... of large variables


def recipe_values(r):
    shape = r["shape"]
    rows, cols = (shape[0], shape[1]) if len(shape) == 2 else (1, shape[0])
    i = np.arange(rows, dtype=np.int64).reshape(rows, 1)
    j = np.arange(cols, dtype=np.int64).reshape(1, cols)
    k = (i * r["a"] + j * r["b"] + r["c"]) % r["m"] - (r["m"] - 1) // 2
    return torch.tensor(k.astype(np.float64) / r["d"]).reshape(shape)


def summary(t, sums=True, small=2000):
    """All values of a tensor of at most `small` elements; else every
    SAMPLE_EVERY-th value, with row and column sums unless sums is False."""
    if t.numel() <= small:
        return {"values": flat(t)}
    s = {"sample": flat(t.reshape(-1)[::SAMPLE_EVERY])}
    if sums:
        s["row_sums"] = flat(t.sum(dim=1))
        s["col_sums"] = flat(t.sum(dim=0))
    return s


def read_idx(path, count):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    if magic == 2051:
        return np.frombuffer(data, dtype=np.uint8, count=count * 784, offset=16).reshape(count, 784)
    if magic == 2049:
        return np.frombuffer(data, dtype=np.uint8, count=count, offset=8)
    raise ValueError("%s: bad IDX magic %d" % (path, magic))


def mlp_step_goldens():
    pixels = read_idx(MNIST_IMAGES, BATCH)
    labels = read_idx(MNIST_LABELS, BATCH)
    # services/data scales pixels by float32 division by 255.
    x = torch.tensor((pixels.astype(np.float32) / np.float32(255.0)).astype(np.float64))
    y = torch.tensor(labels.astype(np.int64))

    params = [recipe_values(r).requires_grad_(True) for r in WEIGHT_RECIPES]
    w1, b1, w2, b2 = params

    def forward():
        # Flatten, Dense(128, relu), Dense(10) with Keras's [in, out] kernels;
        # the softmax is folded into the loss, as Keras does for training.
        h = torch.relu(x @ w1 + b1)
        return h @ w2 + b2

    # float32 computes the hidden pre-activations to about 1e-6; none may sit
    # so close to zero that float32 could take the other side of the relu.
    with torch.no_grad():
        margin = float((x @ w1 + b1).abs().min())
    if margin < 1e-5:
        raise ValueError("a hidden pre-activation is %g from zero; choose other weight recipes" % margin)

    logits = forward()
    loss = F.cross_entropy(logits, y)
    loss.backward()
    probabilities = torch.softmax(logits, dim=-1)

    before = [p.detach().clone() for p in params]
    # examples/mnist/mlp.json's optimizer: Adam, learning_rate 0.001, Keras's
    # other defaults (epsilon hat mapped as for the optimizer goldens).
    opt = {"type": "Adam", "learning_rate": 0.001}
    variables = []
    with torch.no_grad():
        updaters = []
        for p in params:
            u = TorchAsKeras(opt, p, sparse=False)
            grad = p.grad.clone()
            u.step(grad)
            updaters.append((u, grad))
    for r, p, b, (u, grad) in zip(WEIGHT_RECIPES, params, before, updaters):
        st = u.o.state[p]
        variables.append({"name": r["name"], "recipe": r, "gradient": summary(grad),
                          "update": summary(p.detach() - b),
                          "slots": {"momentum": summary(st["exp_avg"], False, 200),
                                    "velocity": summary(st["exp_avg_sq"], False, 200)}})
    with torch.no_grad():
        loss_after = F.cross_entropy(forward(), y)

    return {
        "generator": "tests/goldens/make_goldens.py (torch autograd + torch.optim.Adam, float64)",
        "job": "examples/mnist/mlp.json",
        "weights": "w[i][j] = ((i*a + j*b + c) mod m - (m-1)/2) / d per recipe; a bias is one row",
        "sample_every": SAMPLE_EVERY,
        "images": {"source": "../shared/data/mnist/t10k-images-idx3-ubyte.gz, first %d" % BATCH,
                   "pixels": [[int(v) for v in row] for row in pixels]},
        "labels": [int(v) for v in labels],
        "logits": flat(logits),
        "probabilities": flat(probabilities),
        "loss": float(loss),
        "variables": variables,
        "loss_after": float(loss_after),
    }


# --------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = ap.parse_args()
    outputs = {
        "optimizer_goldens.json": optimizer_goldens(),
        "loss_goldens.json": loss_goldens(),
        "mlp_step_goldens.json": mlp_step_goldens(),
    }
    os.makedirs(OUT_DIR, exist_ok=True)
    stale = []
    for name, doc in outputs.items():
        text = emit(doc) + "\n"
        path = os.path.join(OUT_DIR, name)
        if args.check:
            try:
                with open(path, encoding="utf-8") as f:
                    same = f.read() == text
            except FileNotFoundError:
                same = False
            if not same:
                stale.append(path)
            continue
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print("wrote %s (%d bytes)" % (os.path.relpath(path, ROOT), len(text)))
    if stale:
        print("make_goldens: out of date: " + ", ".join(os.path.relpath(p, ROOT) for p in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
