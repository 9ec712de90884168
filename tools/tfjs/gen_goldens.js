#!/usr/bin/env node
// Golden generator: Keras-format model JSON and reference numbers from
// TensorFlow.js (npm @tensorflow/tfjs 4.22.0, pinned in package.json), for the
// runtime's C++ tests.
//
//   cd tools/tfjs && npm ci      # or: scripts/setup.sh
//   node tools/tfjs/gen_goldens.js [--out DIR]
//
// writes, into DIR (default services/model/tests/data/tfjs):
//   layers.json          one case per layer and argument (layer_cases.js)
//   models/<name>.json   whole models, exactly model.toJSON(null, false)
//   models_goldens.json  a case for each of those models (model_cases.js)
// tools/tfjs/check_goldens.sh regenerates and compares bytes.
//
// A case: {name, layers (Keras class names, no InputLayer), model
// (toJSON(null, false)), weights (every model.weights entry, in that order,
// named as TF.js names them: "<layer>/<weight>"), inputs (model.inputs order,
// named after their input layer), output (apply(x, {training: false})),
// upstream r, grads (dL/dw for the trainable weights, dL/dx for the float32
// inputs, where L = sum(output * r)), rtol, atol, note}. Weights, inputs and r
// come from mulberry32 seeded with a hash of the case's name, never TF's
// RNG. Every float is written as the shortest decimal that rounds to the
// float32 value. Runs on TF.js' pure-JavaScript CPU backend.
//
// Tolerances: rtol 1e-5, atol 1e-6 unless measured otherwise: each case is
// rerun three times with every weight and input moved by one float32 ulp,
// and the first of (1e-5, 1e-6), (1e-5, 1e-5), (1e-4, 1e-5), (1e-4, 1e-4), ...
// under which four times the largest change fits is used (with a note saying
// so). The generator fails when no step fits (a tie or a kink).
//
// What TF.js 4.22 lacks, so no case has it:
//   - Subtract (no tf.layers.subtract; shared_tower computes a - b as
//     Add(a, Rescaling(scale=-1)(b)));
//   - Hashing (no tf.layers.hashing);
//   - the "exponential" activation (not registered);
//   - Conv1D padding "causal" (accepted, then call() throws
//     NotImplementedError);
//   - ELU with alpha other than 1 (throws), so only the default;
//   - Softmax layer on an axis other than the last (throws); note TF.js'
//     Softmax layer defaults to, and writes, "axis": 1 (Keras: -1);
//   - Concatenate on a negative axis other than -1 (its concat fails at run
//     time), so the cases use positive axes.
// Wrong in TF.js 4.22, so no case has it:
//   - BatchNormalization with axis other than -1: the inference output
//     broadcasts the per-channel parameters along the flattened last axis;
//   - DepthwiseConv2D dilation_rate: written to the JSON, ignored by call().
// Patched here (golden_lib.js), so the goldens show what TF.js means:
//   - CategoryEncoding.computeOutputShape overwrites its input's shape (the
//     InputLayer would be written with batch_input_shape [null, num_tokens]);
//     it is given a copy;
//   - Greater has no gradient (ThresholdedReLU); zero is registered, as
//     TensorFlow treats comparisons.
// Forward only ("grads" left out, with a note saying why):
//   - Conv2D and Conv1D with dilation_rate above 1 (no gradient in TF.js);
//   - BatchNormalization and LayerNormalization without both gamma and beta
//     (their gradient throws);
//   - AveragePooling1D/2D with padding "same" (TF.js' gradient divides by
//     the whole window, its forward by the in-input count);
//   - mnist_cnn and mnist_mlp (size: their big Dense kernels).
// UpSampling2D (nearest) cases run with batch 1: TF.js' CPU gradient of
// resizeNearestNeighbor reads the wrong part of the upstream gradient for
// every batch element after the first.
// Semantics worth knowing: hard_sigmoid is clip(0.2x + 0.5, 0, 1) (Keras 2,
// not Keras 3's relu6(x + 3)/6); gelu is the exact erf form; bilinear
// UpSampling2D maps output pixel o to input o * in/out (no half-pixel
// centers, unlike Keras 3). TF.js' SeparableConv2D config has no
// depth_multiplier (the depthwise kernel's last dimension says it).
// Present in TF.js and exercised beyond the brief's list: the activations
// relu6, mish and log_softmax (Activation layer), bilinear UpSampling2D,
// Dot on rank-3 inputs, LayerNormalization over two axes.
//
// GOLDEN_DEBUG=1 prints, per case, how far a one-ulp change moves results
// relative to the default tolerance.
'use strict';

const fs = require('fs');
const path = require('path');
const {tf, writeJson, runCase} = require('./golden_lib');

const GENERATOR = 'tools/tfjs/gen_goldens.js';
const TFJS_VERSION = '4.22.0';

function parseArgs(argv) {
  let out = path.join(__dirname, '..', '..', 'services', 'model', 'tests', 'data', 'tfjs');
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--out' && i + 1 < argv.length) {
      out = path.resolve(argv[++i]);
    } else if (argv[i].startsWith('--out=')) {
      out = path.resolve(argv[i].slice('--out='.length));
    } else {
      process.stderr.write(`usage: node gen_goldens.js [--out DIR]\n`);
      process.exit(2);
    }
  }
  return {out};
}

function writeFile(file, text, root) {
  fs.writeFileSync(file, text);
  const rel = path.relative(root, file);
  return {rel, bytes: Buffer.byteLength(text)};
}

function goldensFile(cases) {
  return writeJson({generator: GENERATOR, tfjs_version: TFJS_VERSION, cases}) + '\n';
}

async function main() {
  const {out} = parseArgs(process.argv.slice(2));
  if (tf.version.tfjs !== TFJS_VERSION || tf.version['tfjs-layers'] !== TFJS_VERSION) {
    throw new Error(`need @tensorflow/tfjs ${TFJS_VERSION}, found ${JSON.stringify(tf.version)}`);
  }
  tf.enableProdMode();  // also silences the "install tfjs-node" banner
  await tf.setBackend('cpu');
  await tf.ready();

  const layerCases = require('./layer_cases').cases;
  const modelCases = require('./model_cases').cases;

  const seen = new Set();
  for (const c of [...layerCases, ...modelCases]) {
    if (!/^[a-z0-9]+(_[a-z0-9]+)*$/.test(c.name)) throw new Error(`case name not snake_case: ${c.name}`);
    if (seen.has(c.name)) throw new Error(`duplicate case name ${c.name}`);
    seen.add(c.name);
  }

  const layers = layerCases.map(runCase);
  const models = modelCases.map(runCase);

  // Every layer class that layers.json exercises is used by some model too.
  const inModels = new Set(models.flatMap((c) => c.layers));
  const missing = [...new Set(layers.flatMap((c) => c.layers))].filter((c) => !inModels.has(c));
  if (missing.length) throw new Error(`no model uses ${missing.join(', ')}`);

  const modelsDir = path.join(out, 'models');
  fs.mkdirSync(modelsDir, {recursive: true});
  const summary = [];
  summary.push({...writeFile(path.join(out, 'layers.json'), goldensFile(layers), out), cases: layers.length});
  summary.push({...writeFile(path.join(out, 'models_goldens.json'), goldensFile(models), out), cases: models.length});
  const written = new Set();
  for (const c of models) {
    const name = `${c.name}.json`;
    written.add(name);
    summary.push(writeFile(path.join(modelsDir, name), writeJson(c.model) + '\n', out));
  }
  // Models no longer generated would otherwise linger.
  for (const f of fs.readdirSync(modelsDir)) {
    if (f.endsWith('.json') && !written.has(f)) fs.unlinkSync(path.join(modelsDir, f));
  }
  for (const s of summary) {
    const cases = s.cases === undefined ? '' : `${s.cases} cases, `;
    console.log(`${s.rel}: ${cases}${s.bytes} bytes`);
  }
}

main().catch((e) => {
  console.error(`gen_goldens: ${e.stack || e}`);
  process.exit(1);
});
