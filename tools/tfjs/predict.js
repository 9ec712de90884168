#!/usr/bin/env node
// Loads a TF.js layers model (DIR/model.json and its weight shards, as
// `tfjob-runtime fit --export-tfjs DIR` or TF.js' model.save write them) with
// tf.loadLayersModel, predicts on given inputs and writes the predictions.
//
//   node tools/tfjs/predict.js --model DIR --inputs IN.json --out OUT.json
//
// IN.json is what `fit --predict-out` writes: {"inputs": [{"name", "dtype",
// "shape", "values"}, ...], ...}; each input goes to the model input of its
// name (in order when there is only one). OUT.json: {"shape": [...],
// "values": [...]} (float32 values as JSON numbers). Runs on TF.js'
// pure-JavaScript CPU backend.
//
// Plain @tensorflow/tfjs has no file:// handler under Node (that is
// tfjs-node's), so the model is read through a small IOHandler of our own.
'use strict';

const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs');

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) throw new Error(`bad arguments: ${argv.join(' ')}`);
    args[argv[i].slice(2)] = argv[i + 1];
  }
  for (const k of ['model', 'inputs', 'out']) {
    if (!args[k]) throw new Error(`--${k} is required (--model DIR --inputs IN.json --out OUT.json)`);
  }
  return args;
}

// An IOHandler reading DIR/model.json and the shards its manifest names.
function fileHandler(dir) {
  return {
    load: async () => {
      const doc = JSON.parse(fs.readFileSync(path.join(dir, 'model.json'), 'utf8'));
      const weightSpecs = [];
      const buffers = [];
      for (const group of doc.weightsManifest) {
        weightSpecs.push(...group.weights);
        for (const p of group.paths) buffers.push(fs.readFileSync(path.join(dir, p)));
      }
      const all = Buffer.concat(buffers);
      const weightData = all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength);
      return {modelTopology: doc.modelTopology, weightSpecs, weightData, format: doc.format,
        generatedBy: doc.generatedBy, convertedBy: doc.convertedBy};
    },
  };
}

function toTensor(input) {
  const dtype = input.dtype === 'int64' || input.dtype === 'int32' ? 'int32' : 'float32';
  return tf.tensor(input.values, input.shape, dtype);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  await tf.setBackend('cpu');
  const model = await tf.loadLayersModel(fileHandler(args.model));
  const doc = JSON.parse(fs.readFileSync(args.inputs, 'utf8'));
  const given = doc.inputs;
  let xs;
  if (model.inputs.length === 1) {
    if (given.length !== 1) throw new Error(`the model takes 1 input, ${args.inputs} has ${given.length}`);
    xs = toTensor(given[0]);
  } else {
    xs = model.inputNames.map((name) => {
      const g = given.find((i) => i.name === name);
      if (!g) throw new Error(`${args.inputs} has no input "${name}" (it has ${given.map((i) => i.name)})`);
      return toTensor(g);
    });
  }
  const y = model.predict(xs);
  const out = {shape: y.shape, values: Array.from(await y.data())};
  fs.writeFileSync(args.out, JSON.stringify(out) + '\n');
}

main().catch((e) => {
  console.error(`predict.js: ${e.message}`);
  process.exit(1);
});
