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
// text_order_bigru.json  The text classifier of examples/text: a string
//                    input [1] -> TextVectorization (int ids, each batch
//                    padded to its longest sentence) -> Embedding(TEXT_TOKENS, 16,
//                    mask_zero) -> Bidirectional(GRU(32)) -> Dense 2 softmax.
// text_order_bow.json  Its bag-of-words baseline: TextVectorization
//                    (multi_hot, TEXT_TOKENS wide) -> Dense 32 relu -> Dense 2
//                    softmax.
//
// TF.js has no TextVectorization layer: the one here is a layer class of
// this script that only carries Keras' arguments into the JSON (Keras'
// names and defaults; the runtime reads them as Keras' own).
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

// Must leave room for examples/text/make_order_data.py's default 2000
// filler words, its 2 cue words and the 2 special tokens.
const TEXT_TOKENS = 2100;

class TextVectorization extends tf.layers.Layer {
  constructor(args) {
    super({name: args.name, dtype: 'string'});
    this.keras = {
      max_tokens: args.max_tokens ?? null,
      standardize: 'lower_and_strip_punctuation',
      split: 'whitespace',
      ngrams: null,
      output_mode: args.output_mode ?? 'int',
      output_sequence_length: args.output_sequence_length ?? null,
      pad_to_max_tokens: args.pad_to_max_tokens ?? false,
      sparse: false,
      ragged: false,
      vocabulary: null,
      idf_weights: null,
      encoding: 'utf-8',
    };
  }
  computeOutputShape(inputShape) {
    const k = this.keras;
    return [inputShape[0], k.output_mode === 'int' ? k.output_sequence_length : k.max_tokens];
  }
  getConfig() { return Object.assign({}, super.getConfig(), this.keras); }
  static get className() { return 'TextVectorization'; }
}
tf.serialization.registerClass(TextVectorization);

function textOrderBigru() {
  const text = tf.input({shape: [1], dtype: 'string', name: 'text'});
  let x = new TextVectorization({name: 'vectorize', max_tokens: TEXT_TOKENS}).apply(text);
  x = L.embedding({inputDim: TEXT_TOKENS, outputDim: 16, maskZero: true, name: 'embed'}).apply(x);
  x = L.bidirectional({layer: L.gru({units: 32, recurrentActivation: 'sigmoid', name: 'order'}), mergeMode: 'concat',
                       name: 'bi'}).apply(x);
  const out = L.dense({units: 2, activation: 'softmax', name: 'label'}).apply(x);
  return tf.model({inputs: text, outputs: out, name: 'text_order_bigru'});
}

function textOrderBow() {
  const text = tf.input({shape: [1], dtype: 'string', name: 'text'});
  let x = new TextVectorization({name: 'vectorize', max_tokens: TEXT_TOKENS, output_mode: 'multi_hot',
                                 pad_to_max_tokens: true}).apply(text);
  x = L.dense({units: 32, activation: 'relu', name: 'hidden'}).apply(x);
  const out = L.dense({units: 2, activation: 'softmax', name: 'label'}).apply(x);
  return tf.model({inputs: text, outputs: out, name: 'text_order_bow'});
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

const MODELS = {
  'residual_cnn.json': residualCnn,
  'wide_deep.json': wideDeep,
  'mnist_lstm.json': mnistLstm,
  'text_order_bigru.json': textOrderBigru,
  'text_order_bow.json': textOrderBow,
};

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
    console.log(`make_examples: examples/keras/{${Object.keys(MODELS).map((n) => n.replace('.json', '')).join(',')}}` +
                '.json are what make_examples.js writes');
  }
}

main();
