#!/usr/bin/env node
// Trains a small model in TensorFlow.js and saves it in the layers format
// (DIR/model.json + DIR/group1-shard1of1.bin), for
// `tfjob-runtime fit --initial-weights DIR` to continue from.
//
//   node tools/tfjs/train.js --out DIR [--data ../shared/data/mnist]
//       [--begin 0] [--end 2000] [--epochs 3] [--summary OUT.json]
//
// The model is examples/mnist/mlp.json's MLP with the names the runtime
// gives that job's layers: flatten (input [28, 28]), dense (128, relu),
// dense_1 (10, softmax); sparse categorical cross-entropy, Adam 0.001, batch
// 64, no shuffling, seeded initializers, so runs repeat. It trains on
// MNIST's t10k images [begin, end) (pixels / 255, as the runtime reads
// them). --summary writes {"loss": <the last epoch's loss>, "history":
// [...per-epoch loss], "accuracy": <the last epoch's>}. Pure-JavaScript CPU
// backend; plain @tensorflow/tfjs has no file:// saver under Node, so the
// files are written by a small IOHandler of our own.
'use strict';

const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const tf = require('@tensorflow/tfjs');

function parseArgs(argv) {
  const args = {data: path.join(__dirname, '../../../shared/data/mnist'), begin: '0', end: '2000', epochs: '3'};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) throw new Error(`bad arguments: ${argv.join(' ')}`);
    args[argv[i].slice(2)] = argv[i + 1];
  }
  if (!args.out) throw new Error('--out DIR is required');
  return args;
}

// An IDX file (gzip or plain): its dimensions and bytes.
function readIdx(file) {
  let buf = fs.readFileSync(file);
  if (buf[0] === 0x1f && buf[1] === 0x8b) buf = zlib.gunzipSync(buf);
  const ndim = buf[3];
  const dims = [];
  for (let i = 0; i < ndim; i++) dims.push(buf.readUInt32BE(4 + 4 * i));
  return {dims, data: buf.subarray(4 + 4 * ndim)};
}

function loadMnist(dir, begin, end) {
  const images = readIdx(path.join(dir, 't10k-images-idx3-ubyte.gz'));
  const labels = readIdx(path.join(dir, 't10k-labels-idx1-ubyte.gz'));
  const n = end - begin;
  const px = images.dims[1] * images.dims[2];
  const x = new Float32Array(n * px);
  for (let i = 0; i < n * px; i++) x[i] = images.data[begin * px + i] / 255;
  const y = new Float32Array(n);
  for (let i = 0; i < n; i++) y[i] = labels.data[begin + i];
  return {x: tf.tensor3d(x, [n, images.dims[1], images.dims[2]]), y: tf.tensor1d(y)};
}

function buildModel() {
  const init = (seed) => tf.initializers.glorotUniform({seed});
  const model = tf.sequential({name: 'mnist_mlp'});
  model.add(tf.layers.flatten({name: 'flatten', inputShape: [28, 28]}));
  model.add(tf.layers.dense({name: 'dense', units: 128, activation: 'relu', kernelInitializer: init(1)}));
  model.add(tf.layers.dense({name: 'dense_1', units: 10, activation: 'softmax', kernelInitializer: init(2)}));
  model.compile({optimizer: tf.train.adam(0.001), loss: 'sparseCategoricalCrossentropy', metrics: ['accuracy']});
  return model;
}

// An IOHandler writing DIR/model.json and one weight shard.
function fileSaver(dir) {
  return {
    save: async (artifacts) => {
      fs.mkdirSync(dir, {recursive: true});
      const parts = Array.isArray(artifacts.weightData) ? artifacts.weightData : [artifacts.weightData];
      const shard = Buffer.concat(parts.map((b) => Buffer.from(b)));
      fs.writeFileSync(path.join(dir, 'group1-shard1of1.bin'), shard);
      const doc = {
        format: 'layers-model',
        generatedBy: `TensorFlow.js tfjs-layers v${tf.version_layers}`,
        convertedBy: null,
        modelTopology: artifacts.modelTopology,
        weightsManifest: [{paths: ['group1-shard1of1.bin'], weights: artifacts.weightSpecs}],
      };
      fs.writeFileSync(path.join(dir, 'model.json'), JSON.stringify(doc) + '\n');
      return {modelArtifactsInfo: {dateSaved: new Date(), modelTopologyType: 'JSON', weightDataBytes: shard.length}};
    },
  };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  await tf.setBackend('cpu');
  const {x, y} = loadMnist(args.data, Number(args.begin), Number(args.end));
  const model = buildModel();
  const h = await model.fit(x, y, {batchSize: 64, epochs: Number(args.epochs), shuffle: false, verbose: 0});
  const loss = h.history.loss;
  const acc = h.history.acc || h.history.accuracy;
  for (let e = 0; e < loss.length; e++) {
    console.log(`Epoch ${e + 1}/${loss.length} - loss: ${loss[e].toFixed(4)} - accuracy: ${acc[e].toFixed(4)}`);
  }
  await model.save(fileSaver(args.out));
  console.log(`train.js: wrote ${path.join(args.out, 'model.json')}`);
  if (args.summary) {
    const s = {loss: loss[loss.length - 1], accuracy: acc[acc.length - 1], history: loss};
    fs.writeFileSync(args.summary, JSON.stringify(s) + '\n');
  }
}

main().catch((e) => {
  console.error(`train.js: ${e.message}`);
  process.exit(1);
});
