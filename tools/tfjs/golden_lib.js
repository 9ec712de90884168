// Shared machinery of gen_goldens.js: the deterministic number generator,
// float32 formatting, the JSON writer and the forward/gradient runner.
// See gen_goldens.js for what is generated and why.
'use strict';

const tf = require('@tensorflow/tfjs');

// Two fixes to TF.js 4.22, so that what it computes and writes is what it
// means to (see gen_goldens.js):
// 1. Greater has no gradient, so ThresholdedReLU (x * cast(x > theta)) cannot
//    be differentiated. Register zero, as TensorFlow treats comparisons.
if (tf.getGradient('Greater') == null) {
  tf.registerGradient({
    kernelName: 'Greater',
    inputsToSave: ['a', 'b'],
    gradFunc: (dy, saved) => ({a: () => tf.zerosLike(saved[0]), b: () => tf.zerosLike(saved[1])}),
  });
}
//    Masking computes its mask as any(x != mask_value); neither NotEqual
//    nor Any has a gradient, and the mask is a constant of the input as
//    TensorFlow treats it: zero as well.
for (const [kernelName, inputs] of [['NotEqual', ['a', 'b']], ['Any', ['x']]]) {
  if (tf.getGradient(kernelName) == null) {
    tf.registerGradient({
      kernelName,
      inputsToSave: inputs,
      gradFunc: (dy, saved) => Object.fromEntries(inputs.map((k, i) => [k, () => tf.zeros(saved[i].shape, 'float32')])),
    });
  }
}
// 2. CategoryEncoding.computeOutputShape overwrites the shape array it is
//    given, so the InputLayer before it would get (and write, as its
//    batch_input_shape) [null, num_tokens]. Give it a copy.
{
  const proto = Object.getPrototypeOf(tf.layers.categoryEncoding({numTokens: 1}));
  const orig = proto.computeOutputShape;
  proto.computeOutputShape = function computeOutputShape(inputShape) {
    const copy = Array.isArray(inputShape[0]) ? inputShape.map((s) => s.slice()) : inputShape.slice();
    return orig.call(this, copy);
  };
}

// ---------------------------------------------------------------------------
// Deterministic numbers (never TF's RNG).

// FNV-1a over the UTF-16 code units of s: a case's seed comes from its name,
// so adding or reordering cases leaves the others' numbers alone.
function seedOf(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

// mulberry32: uniform doubles in [0, 1) from a 32-bit state.
function mulberry32(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Rng {
  constructor(name) { this.next = mulberry32(seedOf(name)); }
  // Uniform in [-1, 1).
  sym() { return 2 * this.next() - 1; }
  // Uniform integer in [lo, hi).
  int(lo, hi) { return lo + Math.floor(this.next() * (hi - lo)); }
}

// ---------------------------------------------------------------------------
// Float32 values written so that they round-trip exactly: the shortest
// decimal (fewest significant digits, 1..9) whose float32 rounding is the
// value. JSON.stringify then prints exactly those digits.
function f32(v) {
  const x = Math.fround(v);
  if (!Number.isFinite(x)) throw new Error(`non-finite value ${v}`);
  if (x === 0) return 0;  // also turns -0 into 0
  for (let p = 1; p <= 9; p++) {
    const y = Number(x.toPrecision(p));
    if (Math.fround(y) === x) return y;
  }
  throw new Error(`no 9-digit round trip for ${x}`);
}

// A weight value: 3 significant digits (short, exact in the file), then
// float32. The tensor TF.js computes with holds exactly Math.fround of it.
function short3(v) {
  if (v === 0) return 0;
  return f32(Number(v.toPrecision(3)));
}

// ---------------------------------------------------------------------------
// JSON: objects indented by one space per level, arrays of numbers, strings,
// booleans, nulls and empty objects on one line, keys in insertion order.
// Deterministic.
function isLeaf(v) {
  return v === null || typeof v !== 'object' || Object.keys(v).length === 0;
}
function isFlat(a) {
  return a.every(isLeaf);
}

function writeJson(value, indent = '') {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value)) {
      throw new Error(`non-finite number ${value} in JSON`);
    }
    if (value === undefined) throw new Error('undefined in JSON');
    return JSON.stringify(value);
  }
  const inner = indent + ' ';
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    if (isFlat(value)) return '[' + value.map((v) => writeJson(v)).join(',') + ']';
    return '[\n' + value.map((v) => inner + writeJson(v, inner)).join(',\n') + '\n' + indent + ']';
  }
  const keys = Object.keys(value).filter((k) => value[k] !== undefined);
  if (keys.length === 0) return '{}';
  return '{\n' + keys.map((k) => inner + JSON.stringify(k) + ': ' + writeJson(value[k], inner)).join(',\n') +
    '\n' + indent + '}';
}

// ---------------------------------------------------------------------------
// Weights.

const prod = (a) => a.reduce((x, y) => x * y, 1);

// The value of element i of the weight `shortName` (the part after the last
// '/') with shape `shape`, drawn from rng: scaled like a trained network's
// (variance ~1/fan_in for kernels), with non-trivial BatchNormalization
// statistics. Every value has 3 significant digits.
function weightValue(shortName, shape, rng) {
  const u = rng.sym();
  switch (shortName) {
    case 'kernel':
    case 'pointwise_kernel':
      return short3(u * Math.sqrt(3 / prod(shape.slice(0, -1))));
    case 'recurrent_kernel':  // [units, G * units]: fan-in units
      return short3(u * Math.sqrt(3 / shape[0]));
    case 'depthwise_kernel':  // [kh, kw, in, multiplier]: fan-in kh*kw
      return short3(u * Math.sqrt(3 / (shape[0] * shape[1])));
    case 'bias':
    case 'beta':
      return short3(0.2 * u);
    case 'gamma':
      return short3(1 + 0.3 * u);
    case 'moving_mean':
      return short3(0.3 * u);
    case 'moving_variance':
      return short3(1 + 0.5 * u);  // in [0.5, 1.5)
    case 'embeddings':
      return short3(0.5 * u);
    case 'alpha':  // PReLU
      return short3(0.25 + 0.15 * u);
    default:
      throw new Error(`no initial values for weight kind ${shortName}`);
  }
}

function weightShortName(w) {
  return w.originalName.slice(w.originalName.lastIndexOf('/') + 1);
}

// ---------------------------------------------------------------------------
// One case: build, set weights, draw inputs, run forward and backward.

function inputLayerName(t) { return t.sourceLayer.name; }

// The Keras class names a model uses, in order of first appearance, without
// InputLayer.
function layerClasses(model) {
  const seen = [];
  for (const l of model.layers) {
    const c = l.getClassName();
    if (c !== 'InputLayer' && !seen.includes(c)) seen.push(c);
  }
  return seen;
}

// L = sum(model(x) * r) in inference mode; returns output, dL/dw for the
// trainable weights and dL/dx for the float inputs.
function forwardBackward(model, inputTensors, upstream, withGrads = true) {
  return tf.tidy(() => {
    const floatIdx = inputTensors.map((t, i) => (t.dtype === 'float32' ? i : -1)).filter((i) => i >= 0);
    const apply = (xs) => {
      const y = model.apply(xs.length === 1 ? xs[0] : xs, {training: false});
      if (Array.isArray(y)) throw new Error('models with several outputs are not supported');
      return y;
    };
    const output = apply(inputTensors);
    const r = tf.tensor(upstream, output.shape, 'float32');
    const loss = (xs) => tf.sum(tf.mul(apply(xs), r));
    const trainable = model.trainableWeights.map((w) => w.read());
    let weightGrads = [];
    if (withGrads && trainable.length > 0) {
      const {grads} = tf.variableGrads(() => loss(inputTensors), trainable);
      weightGrads = trainable.map((v) => Array.from(grads[v.name].dataSync()));
    }
    let inputGrads = [];
    if (withGrads && floatIdx.length > 0) {
      const g = tf.grads((...fx) => {
        const xs = inputTensors.slice();
        floatIdx.forEach((k, j) => { xs[k] = fx[j]; });
        return loss(xs);
      })(floatIdx.map((k) => inputTensors[k]));
      inputGrads = g.map((t) => Array.from(t.dataSync()));
    }
    return {
      outputShape: output.shape,
      output: Array.from(output.dataSync()),
      weightGrads,
      inputGrads,
      floatIdx,
    };
  });
}

// The tolerance ladder: the first (rtol, atol) under which SAFETY times the
// measured perturbation of every value still fits. See measureSensitivity.
const SAFETY = 4;
const LADDER = [[1e-5, 1e-6], [1e-5, 1e-5], [1e-4, 1e-5], [1e-4, 1e-4], [1e-3, 1e-4], [1e-3, 1e-3]];

// Runs the case again with every float32 weight and input moved by one ulp
// (random sign, three draws), takes the largest change seen for each value
// and returns the first tolerance of LADDER that covers SAFETY times it. An
// implementation that sums in another order differs from TF.js by
// about this much, so the case's tolerance must cover it: this is what "the
// math forces". A large change also exposes a tie (two equal maxima) or a
// value on a kink (ReLU at 0), which would make the golden ill-posed.
// keepZeros: inputs that are exactly 0 stay 0 (a masked step must stay
// masked; moving it by an ulp would unmask it).
function measureSensitivity(model, name, weightValues, inputTensors, upstream, base, withGrads, keepZeros) {
  const rng = new Rng(name + '/ulp');
  const bump = (v) => {
    const x = Math.fround(v);
    const ulp = x === 0 ? 1e-45 : Math.abs(Math.fround(x * (1 + 2 ** -23)) - x) || 1e-45;
    return Math.fround(x + (rng.next() < 0.5 ? -ulp : ulp));
  };
  const flat = (res) => (withGrads ? [res.output, ...res.weightGrads, ...res.inputGrads] : [res.output]);
  const want = flat(base);
  const dev = want.map((a) => new Float64Array(a.length));
  for (let draw = 0; draw < 3; draw++) {
    const w = model.weights.map((wt, i) => tf.tensor(weightValues[i].map(bump), wt.shape, 'float32'));
    model.setWeights(w);
    w.forEach((t) => t.dispose());
    const bumpInput = (v) => (keepZeros && v === 0 ? 0 : bump(v));
    const xs = inputTensors.map((t) => (t.dtype === 'float32' ? tf.tensor(Array.from(t.dataSync()).map(bumpInput), t.shape) : t));
    const res = forwardBackward(model, xs, upstream, withGrads);
    xs.forEach((t, i) => { if (t !== inputTensors[i]) t.dispose(); });
    flat(res).forEach((a, j) => a.forEach((v, k) => { dev[j][k] = Math.max(dev[j][k], Math.abs(v - want[j][k])); }));
  }
  // Restore the exact weights.
  const w = model.weights.map((wt, i) => tf.tensor(weightValues[i], wt.shape, 'float32'));
  model.setWeights(w);
  w.forEach((t) => t.dispose());
  let maxAbs = 0;
  if (process.env.GOLDEN_DEBUG) {
    let ratio = 0;
    want.forEach((a, j) => a.forEach((v, k) => { ratio = Math.max(ratio, dev[j][k] / (1e-6 + 1e-5 * Math.abs(v))); }));
    console.error(`${name}: max dev/(1e-6 + 1e-5|v|) = ${ratio.toPrecision(3)}`);
  }
  for (const [rtol, atol] of LADDER) {
    let ok = true;
    maxAbs = 0;
    want.forEach((a, j) => a.forEach((v, k) => {
      maxAbs = Math.max(maxAbs, dev[j][k]);
      if (SAFETY * dev[j][k] > atol + rtol * Math.abs(v)) ok = false;
    }));
    if (ok) return {rtol, atol, maxDev: maxAbs};
  }
  throw new Error(`${name}: a one-ulp change of the inputs moves results by up to ${maxAbs}; ` +
    'a tie or a kink? change the case');
}

// spec: {name, build() -> model, inputs: [{range: [lo, hi)} | {scale, offset}]
// per model input (optional), note, noGrads}
function runCase(spec) {
  const rng = new Rng(spec.name);
  const model = spec.build();
  if (model.name !== spec.name) throw new Error(`${spec.name}: model is named ${model.name}`);

  // Weights, in model.weights order.
  const weightValues = model.weights.map((w) => {
    const n = prod(w.shape);
    const short = weightShortName(w);
    const vals = new Array(n);
    for (let i = 0; i < n; i++) vals[i] = weightValue(short, w.shape, rng);
    return vals;
  });
  {
    const ts = model.weights.map((w, i) => tf.tensor(weightValues[i], w.shape, 'float32'));
    model.setWeights(ts);
    ts.forEach((t) => t.dispose());
  }
  // The weights hold exactly what will be written.
  model.weights.forEach((w, i) => {
    const got = w.read().dataSync();
    for (let k = 0; k < got.length; k++) {
      if (got[k] !== Math.fround(weightValues[i][k])) throw new Error(`${spec.name}: weight ${w.originalName} not set`);
    }
  });
  const names = model.weights.map((w) => w.originalName);
  if (new Set(names).size !== names.length) throw new Error(`${spec.name}: duplicate weight names ${names}`);

  // Inputs.
  const batch = spec.batch || 2;
  const inputSpecs = spec.inputs || [];
  const inputs = model.inputs.map((t, i) => {
    const s = inputSpecs[i] || {};
    const shape = [batch, ...t.shape.slice(1)];
    if (shape.some((d) => d == null)) throw new Error(`${spec.name}: input ${i} has an unknown dimension`);
    const n = prod(shape);
    const values = new Array(n);
    if (t.dtype === 'int32') {
      if (!s.range) throw new Error(`${spec.name}: int input ${i} needs a range`);
      for (let k = 0; k < n; k++) values[k] = rng.int(s.range[0], s.range[1]);
    } else {
      if (s.range) throw new Error(`${spec.name}: float input ${i} takes scale/offset`);
      const scale = s.scale === undefined ? 1 : s.scale;
      const offset = s.offset || 0;
      for (let k = 0; k < n; k++) values[k] = f32(offset + scale * rng.sym());
      // zeroSteps [[example, step], ...]: those time steps all zero, for
      // Masking (a [batch, time, features] input).
      for (const [b, t] of s.zeroSteps || []) {
        const row = prod(shape.slice(2));
        for (let k = 0; k < row; k++) values[(b * shape[1] + t) * row + k] = 0;
      }
    }
    return {name: inputLayerName(t), shape, dtype: t.dtype, values};
  });
  const inputTensors = inputs.map((x) => tf.tensor(x.values, x.shape, x.dtype));

  // Output shape, then the upstream gradient r.
  const probe = tf.tidy(() => model.apply(inputTensors.length === 1 ? inputTensors[0] : inputTensors, {training: false}).shape);
  const upstream = new Array(prod(probe));
  for (let k = 0; k < upstream.length; k++) upstream[k] = f32(rng.sym());

  const res = forwardBackward(model, inputTensors, upstream, !spec.noGrads);
  const keepZeros = inputSpecs.some((s) => s && s.zeroSteps);
  const measured = measureSensitivity(model, spec.name, weightValues, inputTensors, upstream, res, !spec.noGrads, keepZeros);
  // A case may ask for at least a given step of the ladder (minTolerance,
  // with minToleranceWhy: an algorithm that rounds more than a summation
  // order does); the measured step still wins where it is wider.
  const step = (t) => LADDER.findIndex(([r, a]) => r === t[0] && a === t[1]);
  const floor = spec.minTolerance ? step(spec.minTolerance) : -1;
  if (spec.minTolerance && floor < 0) throw new Error(`${spec.name}: minTolerance is not a step of the ladder`);
  const tol = floor > step([measured.rtol, measured.atol])
    ? {rtol: LADDER[floor][0], atol: LADDER[floor][1], maxDev: measured.maxDev, floor: true}
    : measured;
  inputTensors.forEach((t) => t.dispose());

  const notes = [];
  if (spec.note) notes.push(spec.note);
  if (tol.floor) {
    notes.push(`tolerance widened to (${tol.rtol}, ${tol.atol}): ${spec.minToleranceWhy}`);
  } else if (tol.rtol !== LADDER[0][0] || tol.atol !== LADDER[0][1]) {
    notes.push(`tolerance widened: moving every weight and input by one float32 ulp moves some ` +
      `output or gradient by up to ${f32(tol.maxDev)} (long float32 sums; another summation order ` +
      `differs by about as much), and ${SAFETY}x that must fit`);
  }
  if (spec.noGrads) notes.push(spec.noGrads);

  const c = {
    name: spec.name,
    layers: layerClasses(model),
    model: model.toJSON(null, false),
    weights: model.weights.map((w, i) => ({name: w.originalName, shape: w.shape, values: weightValues[i]})),
    inputs,
    output: {shape: res.outputShape, values: res.output.map(f32)},
    upstream,
  };
  if (!spec.noGrads) {
    c.grads = {
      weights: model.trainableWeights.map((w, i) => ({name: w.originalName, values: res.weightGrads[i].map(f32)})),
      inputs: res.floatIdx.map((k, j) => ({name: inputs[k].name, values: res.inputGrads[j].map(f32)})),
    };
  }
  c.rtol = tol.rtol;
  c.atol = tol.atol;
  if (notes.length) c.note = notes.join('; ');
  model.dispose();
  return c;
}

module.exports = {tf, Rng, f32, writeJson, runCase, layerClasses};
