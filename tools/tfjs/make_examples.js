#!/usr/bin/env node
// The Keras Functional models of examples/keras, written by TensorFlow.js
// (npm @tensorflow/tfjs 4.22.0, pinned in package.json) with
// model.toJSON(null, false), in the layout of the TF.js goldens
// (golden_lib.js' writeJson: one space per level, keys in TF.js' order):
//
//   cd tools/tfjs && npm ci      # or: scripts/setup.sh
//   node tools/tfjs/make_examples.js [--out DIR]   # default examples/keras
//   node tools/tfjs/make_examples.js --check       # exit 1 if the committed
//                                                  # files differ
//
// residual_cnn.json  MNIST: a strided Conv2D stem, two residual blocks
//                    (Conv2D + BatchNormalization + Add) at 14x14 and 7x7,
//                    GlobalAveragePooling2D, Dense softmax.
// wide_deep.json     A Criteo-like recommender: inputs "dense" [13] float32
//                    and "cat" [26] int32 ids of one shared id space of
//                    size VOCAB (examples/keras/wide_deep/make_data.py);
//                    deep = Embedding(VOCAB, 8) -> Flatten -> Concatenate
//                    with dense -> LayerNormalization -> Dense 64 relu ->
//                    Dense 32 relu -> Dense 1; wide = Dense 1 on dense;
//                    Add, sigmoid.
// mnist_lstm.json    MNIST as 28 rows of 28 pixels: LSTM(128) (sigmoid
//                    gates, as Keras' default) over the rows, Dense softmax.
//
// The JSON holds no weights (Keras' to_json() never does) and every layer
// is named, so the files depend on nothing but this script and TF.js.
'use strict';

const fs = require('fs');
const path = require('path');
if (!fs.existsSync(path.join(__dirname, 'node_modules', '@tensorflow', 'tfjs', 'package.json'))) {
  console.error(`make_examples: ${path.join(__dirname, 'node_modules')} is missing: run scripts/setup.sh ` +
                '(or: cd tools/tfjs && npm ci)');
  process.exit(1);
}
const {tf, writeJson} = require('./golden_lib');

const L = tf.layers;
// Must equal make_data.py's --vocab default.
const VOCAB = 100000;

function residualCnn() {
  const image = tf.input({shape: [28, 28, 1], name: 'image'});
  const convBnRelu = (x, filters, strides, name) => {
    x = L.conv2d({filters, kernelSize: 3, strides, padding: 'same', useBias: false, name: `${name}_conv`}).apply(x);
    x = L.batchNormalization({name: `${name}_bn`}).apply(x);
    return L.reLU({name: `${name}_relu`}).apply(x);
  };
  const block = (x, filters, name) => {
    let y = convBnRelu(x, filters, 1, `${name}_a`);
    y = L.conv2d({filters, kernelSize: 3, padding: 'same', useBias: false, name: `${name}_b_conv`}).apply(y);
    y = L.batchNormalization({name: `${name}_b_bn`}).apply(y);
    x = L.add({name: `${name}_add`}).apply([x, y]);
    return L.reLU({name: `${name}_out`}).apply(x);
  };
  let x = convBnRelu(image, 16, 2, 'stem');  // 14x14x16
  x = block(x, 16, 'block1');
  x = convBnRelu(x, 32, 2, 'down');  // 7x7x32
  x = block(x, 32, 'block2');
  x = L.globalAveragePooling2d({name: 'gap'}).apply(x);
  const out = L.dense({units: 10, activation: 'softmax', name: 'classifier'}).apply(x);
  return tf.model({inputs: image, outputs: out, name: 'residual_cnn'});
}

function wideDeep() {
  const dense = tf.input({shape: [13], name: 'dense'});
  const cat = tf.input({shape: [26], dtype: 'int32', name: 'cat'});
  let deep = L.embedding({inputDim: VOCAB, outputDim: 8, name: 'cat_embedding'}).apply(cat);
  deep = L.flatten({name: 'cat_flat'}).apply(deep);
  deep = L.concatenate({name: 'deep_concat'}).apply([deep, dense]);
  deep = L.layerNormalization({name: 'deep_norm'}).apply(deep);
  deep = L.dense({units: 64, activation: 'relu', name: 'deep1'}).apply(deep);
  deep = L.dense({units: 32, activation: 'relu', name: 'deep2'}).apply(deep);
  deep = L.dense({units: 1, name: 'deep_out'}).apply(deep);
  const wide = L.dense({units: 1, name: 'wide'}).apply(dense);
  let out = L.add({name: 'wide_plus_deep'}).apply([wide, deep]);
  out = L.activation({activation: 'sigmoid', name: 'prob'}).apply(out);
  return tf.model({inputs: [dense, cat], outputs: out, name: 'wide_deep'});
}

function mnistLstm() {
  return tf.sequential({
    name: 'mnist_lstm',
    layers: [
      L.lstm({inputShape: [28, 28], units: 128, recurrentActivation: 'sigmoid', name: 'rows'}),
      L.dense({units: 10, activation: 'softmax', name: 'classifier'}),
    ],
  });
}

const MODELS = {'residual_cnn.json': residualCnn, 'wide_deep.json': wideDeep, 'mnist_lstm.json': mnistLstm};

function main() {
  const args = process.argv.slice(2);
  const root = path.resolve(__dirname, '..', '..');
  const committed = path.join(root, 'examples', 'keras');
  let out = committed;
  let check = false;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--out' && i + 1 < args.length) {
      out = path.resolve(args[++i]);
    } else if (args[i] === '--check') {
      check = true;
    } else {
      console.error('usage: make_examples.js [--out DIR | --check]');
      process.exit(2);
    }
  }
  let differ = 0;
  for (const [name, build] of Object.entries(MODELS)) {
    const text = writeJson(build().toJSON(null, false)) + '\n';
    const file = path.join(check ? committed : out, name);
    if (check) {
      const have = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : null;
      if (have !== text) {
        const why = have === null ? 'is missing' : 'differs from what make_examples.js writes';
        console.error(`make_examples: examples/keras/${name} ${why}`);
        differ++;
      }
    } else {
      fs.mkdirSync(out, {recursive: true});
      fs.writeFileSync(file, text);
      console.log(`make_examples: wrote ${path.relative(process.cwd(), file) || file}`);
    }
  }
  if (check) {
    if (differ) process.exit(1);
    console.log('make_examples: examples/keras/{residual_cnn,wide_deep,mnist_lstm}.json are what make_examples.js ' +
                'writes');
  }
}

main();
