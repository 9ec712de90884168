// Whole models as a TensorFlow.js user would build them: models/<name>.json
// and models_goldens.json. Every layer of layers.json is used by at least
// one of them (gen_goldens.js checks).
'use strict';

const {tf} = require('./golden_lib');

const L = tf.layers;

const cases = [];
// spec: {name, build, inputs, batch, note, noGrads}
const add = (c) => cases.push(c);

const pixels = {scale: 0.5, offset: 0.5};  // uniform in [0, 1)

// 1. The classic TF.js MNIST convnet. No initializer arguments, so the JSON
// carries TF.js' defaults.
add({
  name: 'mnist_cnn',
  build: () => tf.sequential({
    name: 'mnist_cnn',
    layers: [
      L.conv2d({inputShape: [28, 28, 1], filters: 32, kernelSize: 3, activation: 'relu', name: 'conv1'}),
      L.maxPooling2d({poolSize: 2, name: 'pool1'}),
      L.flatten({name: 'flatten'}),
      L.dense({units: 64, activation: 'relu', name: 'dense1'}),
      L.dense({units: 10, activation: 'softmax', name: 'dense2'}),
    ],
  }),
  inputs: [pixels],
  batch: 1,
  noGrads: 'no grads: dense1/kernel alone has 5408*64 values; the weights already make this the largest case',
});

// 2. MNIST multilayer perceptron.
add({
  name: 'mnist_mlp',
  build: () => tf.sequential({
    name: 'mnist_mlp',
    layers: [
      L.flatten({inputShape: [28, 28], name: 'flatten'}),
      L.dense({units: 128, activation: 'relu', name: 'dense1'}),
      L.dense({units: 10, activation: 'softmax', name: 'dense2'}),
    ],
  }),
  inputs: [pixels],
  batch: 1,
  noGrads: 'no grads: dense1/kernel has 784*128 values, its gradient would add 1.3 MB',
});

// 3. A small ResNet: stem, two residual blocks, global pooling.
add({
  name: 'residual_cnn',
  build() {
    const image = tf.input({shape: [28, 28, 1], name: 'image'});
    let x = L.conv2d({filters: 16, kernelSize: 3, padding: 'same', name: 'stem_conv'}).apply(image);
    x = L.batchNormalization({name: 'stem_bn'}).apply(x);
    x = L.reLU({name: 'stem_relu'}).apply(x);
    for (const b of [1, 2]) {
      let y = L.conv2d({filters: 16, kernelSize: 3, padding: 'same', useBias: false, name: `block${b}_conv1`}).apply(x);
      y = L.batchNormalization({name: `block${b}_bn1`}).apply(y);
      y = L.reLU({name: `block${b}_relu1`}).apply(y);
      y = L.conv2d({filters: 16, kernelSize: 3, padding: 'same', useBias: false, name: `block${b}_conv2`}).apply(y);
      y = L.batchNormalization({name: `block${b}_bn2`}).apply(y);
      x = L.add({name: `block${b}_add`}).apply([x, y]);
      x = L.reLU({name: `block${b}_out`}).apply(x);
    }
    x = L.globalAveragePooling2d({name: 'gap'}).apply(x);
    const out = L.dense({units: 10, activation: 'softmax', name: 'classifier'}).apply(x);
    return tf.model({inputs: image, outputs: out, name: 'residual_cnn'});
  },
  inputs: [pixels],
  batch: 1,
});

// 4. Wide & deep: a float input and 26 categorical ids.
add({
  name: 'wide_deep',
  build() {
    const dense = tf.input({shape: [13], name: 'dense'});
    const cat = tf.input({shape: [26], dtype: 'int32', name: 'cat'});
    let deep = L.embedding({inputDim: 1000, outputDim: 8, name: 'cat_embedding'}).apply(cat);
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
  },
  inputs: [{}, {range: [0, 1000]}],
  batch: 3,
});

// 5. One Dense tower shared by two inputs; their difference. TF.js has no
// Subtract layer: a - b is Add(a, Rescaling(-1)(b)).
add({
  name: 'shared_tower',
  build() {
    const left = tf.input({shape: [8], name: 'left'});
    const right = tf.input({shape: [8], name: 'right'});
    const tower = L.dense({units: 12, activation: 'relu', name: 'tower'});
    const a = tower.apply(left);
    const b = tower.apply(right);
    const negB = L.rescaling({scale: -1, name: 'negate'}).apply(b);
    const diff = L.add({name: 'difference'}).apply([a, negB]);
    const out = L.dense({units: 2, name: 'head'}).apply(diff);
    return tf.model({inputs: [left, right], outputs: out, name: 'shared_tower'});
  },
  note: 'TF.js has no Subtract layer: the difference is Add(a, Rescaling(scale=-1)(b))',
});

// 6. Siamese encoder, cosine similarity.
add({
  name: 'siamese_dot',
  build() {
    const query = tf.input({shape: [10], name: 'query'});
    const doc = tf.input({shape: [10], name: 'doc'});
    const enc1 = L.dense({units: 16, activation: 'tanh', name: 'enc1'});
    const enc2 = L.dense({units: 8, name: 'enc2'});
    const q = enc2.apply(enc1.apply(query));
    const d = enc2.apply(enc1.apply(doc));
    const cos = L.dot({axes: 1, normalize: true, name: 'cosine'}).apply([q, d]);
    const out = L.dense({units: 1, activation: 'sigmoid', name: 'match'}).apply(cos);
    return tf.model({inputs: [query, doc], outputs: out, name: 'siamese_dot'});
  },
  batch: 3,
});

// 7. Text classifier: embedding, 1-D convolution, max over time.
add({
  name: 'text_conv1d',
  build() {
    const tokens = tf.input({shape: [20], dtype: 'int32', name: 'tokens'});
    let x = L.embedding({inputDim: 50, outputDim: 8, name: 'embedding'}).apply(tokens);
    x = L.conv1d({filters: 16, kernelSize: 3, activation: 'relu', name: 'conv'}).apply(x);
    x = L.globalMaxPooling1d({name: 'max_over_time'}).apply(x);
    const out = L.dense({units: 1, activation: 'sigmoid', name: 'out'}).apply(x);
    return tf.model({inputs: tokens, outputs: out, name: 'text_conv1d'});
  },
  inputs: [{range: [0, 50]}],
});

// 8. MobileNet-style blocks: depthwise + pointwise with ReLU6, separable.
add({
  name: 'mobilenet_block',
  build() {
    const image = tf.input({shape: [12, 12, 4], name: 'image'});
    let x = L.depthwiseConv2d({kernelSize: 3, padding: 'same', useBias: false, name: 'dw1'}).apply(image);
    x = L.batchNormalization({name: 'dw1_bn'}).apply(x);
    x = L.reLU({maxValue: 6, name: 'dw1_relu6'}).apply(x);
    x = L.conv2d({filters: 8, kernelSize: 1, useBias: false, name: 'pw1'}).apply(x);
    x = L.batchNormalization({name: 'pw1_bn'}).apply(x);
    x = L.reLU({maxValue: 6, name: 'pw1_relu6'}).apply(x);
    x = L.separableConv2d({filters: 8, kernelSize: 3, strides: 2, padding: 'same', activation: 'relu', name: 'sep2'}).apply(x);
    x = L.globalAveragePooling2d({name: 'gap'}).apply(x);
    const out = L.dense({units: 5, activation: 'softmax', name: 'classifier'}).apply(x);
    return tf.model({inputs: image, outputs: out, name: 'mobilenet_block'});
  },
  inputs: [{scale: 4}],
  note: 'inputs in [-4, 4) so that some ReLU6 outputs saturate',
});

// 9. Raw pixel values scaled in the model.
add({
  name: 'rescaling_mlp',
  build: () => tf.sequential({
    name: 'rescaling_mlp',
    layers: [
      L.rescaling({inputShape: [8, 8], scale: 1 / 255, name: 'rescale'}),
      L.flatten({name: 'flatten'}),
      L.dense({units: 16, activation: 'relu', name: 'hidden'}),
      L.dense({units: 3, activation: 'softmax', name: 'out'}),
    ],
  }),
  inputs: [{scale: 127.5, offset: 127.5}],
});

// 10. A small U-Net: two poolings, upsampling and a transposed convolution
// back, skip connections by concatenation.
add({
  name: 'unet_like',
  build() {
    const image = tf.input({shape: [16, 16, 1], name: 'image'});
    const enc1 = L.conv2d({filters: 4, kernelSize: 3, padding: 'same', activation: 'relu', name: 'enc1'}).apply(image);
    let x = L.maxPooling2d({poolSize: 2, name: 'pool1'}).apply(enc1);
    const enc2 = L.conv2d({filters: 8, kernelSize: 3, padding: 'same', activation: 'relu', name: 'enc2'}).apply(x);
    x = L.maxPooling2d({poolSize: 2, name: 'pool2'}).apply(enc2);
    x = L.conv2d({filters: 8, kernelSize: 3, padding: 'same', activation: 'relu', name: 'bottleneck'}).apply(x);
    x = L.upSampling2d({size: [2, 2], name: 'up2'}).apply(x);
    x = L.concatenate({name: 'skip2'}).apply([x, enc2]);
    x = L.conv2d({filters: 4, kernelSize: 3, padding: 'same', activation: 'relu', name: 'dec2'}).apply(x);
    x = L.conv2dTranspose({filters: 4, kernelSize: 3, strides: 2, name: 'up1'}).apply(x);  // 8 -> 17
    x = L.cropping2D({cropping: [[0, 1], [0, 1]], name: 'crop1'}).apply(x);  // 17 -> 16
    x = L.concatenate({name: 'skip1'}).apply([x, enc1]);
    x = L.zeroPadding2d({padding: 1, name: 'pad1'}).apply(x);
    x = L.conv2d({filters: 4, kernelSize: 3, activation: 'relu', name: 'dec1'}).apply(x);
    const out = L.conv2d({filters: 1, kernelSize: 1, activation: 'sigmoid', name: 'mask'}).apply(x);
    return tf.model({inputs: image, outputs: out, name: 'unet_like'});
  },
  inputs: [pixels],
  batch: 1,
  note: 'batch 1: TF.js 4.22\'s CPU gradient of resizeNearestNeighbor (UpSampling2D) is wrong for batch > 1',
});

// 11. MLP with BatchNormalization, Activation layers and Dropout.
add({
  name: 'mlp_batchnorm_dropout',
  build: () => tf.sequential({
    name: 'mlp_batchnorm_dropout',
    layers: [
      L.dense({inputShape: [12], units: 16, name: 'd1'}),
      L.batchNormalization({name: 'bn1'}),
      L.activation({activation: 'relu', name: 'act1'}),
      L.dropout({rate: 0.3, name: 'drop1'}),
      L.dense({units: 8, name: 'd2'}),
      L.batchNormalization({name: 'bn2'}),
      L.activation({activation: 'elu', name: 'act2'}),
      L.dropout({rate: 0.3, name: 'drop2'}),
      L.dense({units: 4, activation: 'softmax', name: 'out'}),
    ],
  }),
  batch: 3,
  note: 'Dropout in inference mode (training=false): the identity',
});

// 12. Time series: 1-D convolutions, poolings.
add({
  name: 'conv1d_timeseries',
  build: () => tf.sequential({
    name: 'conv1d_timeseries',
    layers: [
      L.conv1d({inputShape: [24, 3], filters: 8, kernelSize: 5, padding: 'same', activation: 'relu', name: 'conv1'}),
      L.spatialDropout1d({rate: 0.2, name: 'sdrop'}),
      L.maxPooling1d({poolSize: 2, name: 'pool1'}),
      L.conv1d({filters: 8, kernelSize: 3, strides: 2, activation: 'tanh', name: 'conv2'}),
      L.averagePooling1d({poolSize: 2, name: 'pool2'}),
      L.globalAveragePooling1d({name: 'gap'}),
      L.dense({units: 1, name: 'forecast'}),
    ],
  }),
  note: 'SpatialDropout1D in inference mode (training=false): the identity',
});

// 13. VGG-style stack: padding, convolutions, average pooling, global max
// pooling.
add({
  name: 'vgg_small',
  build: () => tf.sequential({
    name: 'vgg_small',
    layers: [
      L.zeroPadding2d({inputShape: [12, 12, 3], padding: 1, name: 'pad1'}),
      L.conv2d({filters: 8, kernelSize: 3, activation: 'relu', name: 'conv1'}),
      L.conv2d({filters: 8, kernelSize: 3, padding: 'same', activation: 'relu', name: 'conv2'}),
      L.averagePooling2d({poolSize: 2, name: 'pool1'}),
      L.conv2d({filters: 16, kernelSize: 3, padding: 'same', activation: 'relu', name: 'conv3'}),
      L.conv2d({filters: 16, kernelSize: 3, strides: 2, name: 'conv4'}),
      L.globalMaxPooling2d({name: 'gmp'}),
      L.dense({units: 4, activation: 'softmax', name: 'out'}),
    ],
  }),
  batch: 1,
});

// 14. Dense autoencoder with a reshaped reconstruction.
add({
  name: 'dense_autoencoder',
  build: () => tf.sequential({
    name: 'dense_autoencoder',
    layers: [
      L.dense({inputShape: [24], units: 16, activation: 'relu', name: 'enc1'}),
      L.dense({units: 4, name: 'code'}),
      L.dense({units: 16, activation: 'selu', name: 'dec1'}),
      L.dense({units: 24, activation: 'sigmoid', name: 'dec2'}),
      L.reshape({targetShape: [4, 6], name: 'unflatten'}),
    ],
  }),
});

// 15. Attention pooling over a sequence: scores, softmax, weights repeated
// and permuted to the sequence's layout, weighted sum by Dot.
add({
  name: 'attention_pooling',
  build() {
    const seq = tf.input({shape: [6, 8], name: 'sequence'});
    let s = L.dense({units: 1, activation: 'tanh', name: 'score'}).apply(seq);  // [6, 1]
    s = L.flatten({name: 'score_flat'}).apply(s);  // [6]
    const attn = L.softmax({name: 'attention'}).apply(s);
    const context = L.dot({axes: [1, 1], name: 'context'}).apply([attn, seq]);  // [8]
    let w = L.repeatVector({n: 8, name: 'attn_repeat'}).apply(attn);  // [8, 6]
    w = L.permute({dims: [2, 1], name: 'attn_permute'}).apply(w);  // [6, 8]
    const weighted = L.multiply({name: 'weighted'}).apply([seq, w]);
    const mean = L.globalAveragePooling1d({name: 'weighted_mean'}).apply(weighted);
    const both = L.concatenate({name: 'both'}).apply([context, mean]);
    const out = L.dense({units: 3, name: 'out'}).apply(both);
    return tf.model({inputs: seq, outputs: out, name: 'attention_pooling'});
  },
});

// 16. Gated merges of two inputs: Multiply, Maximum, Minimum, Average.
add({
  name: 'gated_merge',
  build() {
    const a = tf.input({shape: [6], name: 'a'});
    const b = tf.input({shape: [6], name: 'b'});
    const ha = L.dense({units: 8, name: 'proj_a'}).apply(a);
    const hb = L.dense({units: 8, name: 'proj_b'}).apply(b);
    const ab = L.concatenate({name: 'ab'}).apply([a, b]);
    const gate = L.dense({units: 8, activation: 'sigmoid', name: 'gate'}).apply(ab);
    const gated = L.multiply({name: 'gated'}).apply([ha, gate]);
    const mx = L.maximum({name: 'max'}).apply([ha, hb]);
    const mn = L.minimum({name: 'min'}).apply([ha, hb]);
    const avg = L.average({name: 'avg'}).apply([gated, mx, mn]);
    const out = L.dense({units: 2, name: 'out'}).apply(avg);
    return tf.model({inputs: [a, b], outputs: out, name: 'gated_merge'});
  },
  batch: 3,
});

// 17. The advanced activations and the noise layers in one stack.
add({
  name: 'noisy_activations',
  build: () => tf.sequential({
    name: 'noisy_activations',
    layers: [
      L.gaussianNoise({inputShape: [10], stddev: 0.1, name: 'noise'}),
      L.dense({units: 12, name: 'd1'}),
      L.leakyReLU({alpha: 0.2, name: 'leaky'}),
      L.gaussianDropout({rate: 0.2, name: 'gdrop'}),
      L.dense({units: 12, name: 'd2'}),
      L.prelu({name: 'prelu'}),
      L.dense({units: 12, name: 'd3'}),
      L.elu({name: 'elu'}),
      L.dense({units: 12, name: 'd4'}),
      L.thresholdedReLU({theta: 0.1, name: 'thresholded'}),
      L.dense({units: 3, name: 'out'}),
    ],
  }),
  batch: 3,
  note: 'GaussianNoise and GaussianDropout in inference mode (training=false): the identity; ' +
    'ThresholdedReLU\'s gradient: the generator registers zero for TF.js\' Greater (TensorFlow\'s treatment)',
});

// 18. A transformer feed-forward block on a sequence.
add({
  name: 'transformer_ffn',
  build() {
    const x = tf.input({shape: [5, 8], name: 'embeddings'});
    const h = L.layerNormalization({name: 'ln1'}).apply(x);
    let f = L.dense({units: 16, activation: 'gelu', name: 'ff1'}).apply(h);
    f = L.dense({units: 8, name: 'ff2'}).apply(f);
    f = L.dropout({rate: 0.1, name: 'ff_drop'}).apply(f);
    let y = L.add({name: 'residual'}).apply([x, f]);
    y = L.layerNormalization({epsilon: 1e-6, name: 'ln2'}).apply(y);
    y = L.globalAveragePooling1d({name: 'pool'}).apply(y);
    const out = L.dense({units: 2, activation: 'softmax', name: 'out'}).apply(y);
    return tf.model({inputs: x, outputs: out, name: 'transformer_ffn'});
  },
  note: 'Dropout in inference mode (training=false): the identity',
});

// 19. Image and tabular inputs.
add({
  name: 'image_tabular',
  build() {
    const image = tf.input({shape: [8, 8, 1], name: 'image'});
    const meta = tf.input({shape: [5], name: 'meta'});
    let x = L.conv2d({filters: 4, kernelSize: 3, activation: 'relu', name: 'conv'}).apply(image);
    x = L.maxPooling2d({poolSize: 2, name: 'pool'}).apply(x);
    x = L.flatten({name: 'flat'}).apply(x);
    const m = L.dense({units: 4, activation: 'relu', name: 'meta_dense'}).apply(meta);
    const both = L.concatenate({name: 'merge'}).apply([x, m]);
    const out = L.dense({units: 3, activation: 'softmax', name: 'out'}).apply(both);
    return tf.model({inputs: [image, meta], outputs: out, name: 'image_tabular'});
  },
  inputs: [pixels, {}],
});

// 20. Categorical features: token counts and a one-hot day of week.
add({
  name: 'category_features',
  build() {
    const tokens = tf.input({shape: [6], dtype: 'int32', name: 'tokens'});
    const day = tf.input({shape: [1], dtype: 'int32', name: 'day'});
    const counts = L.categoryEncoding({numTokens: 12, outputMode: 'count', name: 'token_counts'}).apply(tokens);
    const present = L.categoryEncoding({numTokens: 12, outputMode: 'multiHot', name: 'token_present'}).apply(tokens);
    const dayHot = L.categoryEncoding({numTokens: 7, outputMode: 'oneHot', name: 'day_one_hot'}).apply(day);
    const x = L.concatenate({name: 'features'}).apply([counts, present, dayHot]);
    const h = L.dense({units: 8, activation: 'relu', name: 'hidden'}).apply(x);
    const out = L.dense({units: 1, name: 'out'}).apply(h);
    return tf.model({inputs: [tokens, day], outputs: out, name: 'category_features'});
  },
  inputs: [{range: [0, 12]}, {range: [0, 7]}],
  batch: 3,
  note: 'CategoryEncoding: the generator gives TF.js\' computeOutputShape a copy of the input shape, which it ' +
    'would otherwise overwrite (making the InputLayers\' batch_input_shape [null, num_tokens])',
});

// 21. Siamese convnet on two images: one Conv2D, one pooling and one Dense,
// each shared.
add({
  name: 'siamese_conv',
  build() {
    const a = tf.input({shape: [10, 10, 1], name: 'image_a'});
    const b = tf.input({shape: [10, 10, 1], name: 'image_b'});
    const conv = L.conv2d({filters: 4, kernelSize: 3, activation: 'relu', name: 'shared_conv'});
    const pool = L.globalAveragePooling2d({name: 'shared_pool'});
    const embed = L.dense({units: 6, name: 'shared_embed'});
    const ea = embed.apply(pool.apply(conv.apply(a)));
    const eb = embed.apply(pool.apply(conv.apply(b)));
    const pair = L.concatenate({name: 'pair'}).apply([ea, eb]);
    const out = L.dense({units: 1, activation: 'sigmoid', name: 'same'}).apply(pair);
    return tf.model({inputs: [a, b], outputs: out, name: 'siamese_conv'});
  },
  inputs: [pixels, pixels],
});

// 22. Bag of embeddings, Sequential with an int32 input (an explicit
// InputLayer: dtype on the Embedding would make its weights int32).
add({
  name: 'embedding_bag',
  build: () => tf.sequential({
    name: 'embedding_bag',
    layers: [
      L.inputLayer({inputShape: [7], dtype: 'int32', name: 'ids'}),
      L.embedding({inputDim: 30, outputDim: 6, name: 'embedding'}),
      L.globalAveragePooling1d({name: 'mean'}),
      L.dense({units: 4, activation: 'softmax', name: 'out'}),
    ],
  }),
  inputs: [{range: [0, 30]}],
  batch: 3,
});

// 23. Separable, depthwise and transposed convolutions, upsampling.
add({
  name: 'separable_upsampling',
  build: () => tf.sequential({
    name: 'separable_upsampling',
    layers: [
      L.separableConv2d({inputShape: [8, 8, 3], filters: 6, kernelSize: 3, activation: 'relu', name: 'sep1'}),
      L.depthwiseConv2d({kernelSize: 3, depthMultiplier: 2, padding: 'same', name: 'dw2'}),
      L.batchNormalization({name: 'bn2'}),
      L.reLU({name: 'relu2'}),
      L.conv2dTranspose({filters: 4, kernelSize: 2, strides: 2, padding: 'same', name: 'up1'}),
      L.upSampling2d({size: [2, 2], name: 'up2'}),
      L.cropping2D({cropping: 2, name: 'crop'}),
      L.conv2d({filters: 2, kernelSize: 3, strides: 2, activation: 'softplus', name: 'head'}),
      L.flatten({name: 'flat'}),
    ],
  }),
  batch: 1,
  note: 'batch 1: TF.js 4.22\'s CPU gradient of resizeNearestNeighbor (UpSampling2D) is wrong for batch > 1',
});

// 24. Sequential that starts with an explicit InputLayer.
add({
  name: 'sequential_input_layer',
  build: () => tf.sequential({
    name: 'sequential_input_layer',
    layers: [
      L.inputLayer({inputShape: [6], name: 'features'}),
      L.dense({units: 8, activation: 'swish', name: 'd1'}),
      L.dense({units: 8, activation: 'softsign', name: 'd2'}),
      L.dense({units: 3, activation: 'hardSigmoid', name: 'out'}),
    ],
  }),
  batch: 3,
  inputs: [{scale: 2}],
});

// 25. Question/answer encoder: one Embedding and one Conv1D shared by two
// token inputs, matched by Dot.
add({
  name: 'shared_text_encoder',
  build() {
    const q = tf.input({shape: [8], dtype: 'int32', name: 'question'});
    const a = tf.input({shape: [8], dtype: 'int32', name: 'answer'});
    const emb = L.embedding({inputDim: 40, outputDim: 6, name: 'shared_embedding'});
    const conv = L.conv1d({filters: 6, kernelSize: 3, padding: 'same', activation: 'tanh', name: 'shared_conv'});
    const qv = L.globalMaxPooling1d({name: 'q_pool'}).apply(conv.apply(emb.apply(q)));
    const av = L.globalAveragePooling1d({name: 'a_pool'}).apply(conv.apply(emb.apply(a)));
    const score = L.dot({axes: 1, name: 'score'}).apply([qv, av]);
    const out = L.activation({activation: 'sigmoid', name: 'prob'}).apply(score);
    return tf.model({inputs: [q, a], outputs: out, name: 'shared_text_encoder'});
  },
  inputs: [{range: [0, 40]}, {range: [0, 40]}],
  batch: 3,
});

// 26. An LSTM over MNIST's 28 rows of 28 pixels (issue 44's example).
add({
  name: 'mnist_lstm',
  build: () => tf.sequential({
    name: 'mnist_lstm',
    layers: [
      L.lstm({inputShape: [28, 28], units: 16, recurrentActivation: 'sigmoid', name: 'rows_lstm'}),
      L.dense({units: 10, activation: 'softmax', name: 'out'}),
    ],
  }),
  inputs: [pixels],
  batch: 2,
});

// 27. Text classifier: embedded tokens through a bidirectional GRU, pooled.
add({
  name: 'text_bigru',
  build() {
    const tokens = tf.input({shape: [12], dtype: 'int32', name: 'tokens'});
    let x = L.embedding({inputDim: 50, outputDim: 8, name: 'embedding'}).apply(tokens);
    x = L.bidirectional({layer: L.gru({units: 6, returnSequences: true, name: 'gru'}), name: 'bigru'}).apply(x);
    x = L.globalAveragePooling1d({name: 'pool'}).apply(x);
    const out = L.dense({units: 1, activation: 'sigmoid', name: 'out'}).apply(x);
    return tf.model({inputs: tokens, outputs: out, name: 'text_bigru'});
  },
  inputs: [{range: [0, 50]}],
  batch: 3,
});

// 28. Sequence tagger: a SimpleRNN's every step through one Dense.
add({
  name: 'sequence_tagger',
  build: () => tf.sequential({
    name: 'sequence_tagger',
    layers: [
      L.simpleRNN({inputShape: [10, 4], units: 8, returnSequences: true, name: 'rnn'}),
      L.timeDistributed({layer: L.dense({units: 2, activation: 'sigmoid', name: 'tag'}), name: 'tags'}),
    ],
  }),
  batch: 3,
});

// 29. Forecaster: two stacked LSTMs, the first reading backwards, and a
// GRU beside them over the same series, summed by a Bidirectional
// LSTM's pair of directions.
add({
  name: 'stacked_forecast',
  build() {
    const series = tf.input({shape: [8, 3], name: 'series'});
    let a = L.lstm({units: 6, returnSequences: true, goBackwards: true, name: 'lstm1'}).apply(series);
    a = L.lstm({units: 4, name: 'lstm2'}).apply(a);
    const b = L.bidirectional({layer: L.lstm({units: 2, name: 'lstm3'}), mergeMode: 'sum', name: 'bilstm'}).apply(series);
    const c = L.gru({units: 4, name: 'gru1'}).apply(series);
    const x = L.concatenate({name: 'joined'}).apply([a, b, c]);
    const out = L.dense({units: 1, name: 'forecast'}).apply(x);
    return tf.model({inputs: series, outputs: out, name: 'stacked_forecast'});
  },
  batch: 3,
});

// 30. Padded token sequences: id 0 is padding (mask_zero), skipped by the
// LSTM.
add({
  name: 'masked_text_lstm',
  build: () => tf.sequential({
    name: 'masked_text_lstm',
    layers: [
      L.inputLayer({inputShape: [10], dtype: 'int32', name: 'tokens'}),
      L.embedding({inputDim: 30, outputDim: 6, maskZero: true, name: 'embedding'}),
      L.lstm({units: 8, name: 'lstm'}),
      L.dense({units: 1, activation: 'sigmoid', name: 'out'}),
    ],
  }),
  inputs: [{range: [0, 30]}],
  batch: 3,
});

// 31. Sessions of feature vectors, padded with all-zero steps (Masking).
add({
  name: 'padded_sessions',
  build: () => tf.sequential({
    name: 'padded_sessions',
    layers: [
      L.masking({inputShape: [6, 3], maskValue: 0, name: 'padding'}),
      L.gru({units: 5, recurrentActivation: 'sigmoid', name: 'gru'}),
      L.dense({units: 2, activation: 'softmax', name: 'out'}),
    ],
  }),
  inputs: [{zeroSteps: [[0, 4], [0, 5], [1, 2], [2, 5]]}],
  batch: 3,
});

// 32. An LSTM's every step and both final states (return_state), the
// steps pooled and joined with the states.
add({
  name: 'lstm_states',
  build() {
    const series = tf.input({shape: [7, 3], name: 'series'});
    const [seq, h, c] = L.lstm({units: 5, returnSequences: true, returnState: true, unitForgetBias: false,
                                recurrentActivation: 'hardSigmoid', name: 'lstm'}).apply(series);
    const pooled = L.globalAveragePooling1d({name: 'pool'}).apply(seq);
    const x = L.concatenate({name: 'joined'}).apply([pooled, h, c]);
    const out = L.dense({units: 2, activation: 'softmax', name: 'out'}).apply(x);
    return tf.model({inputs: series, outputs: out, name: 'lstm_states'});
  },
  batch: 3,
});

// 33. Encoders whose final states are used: a GRU read backwards and a
// SimpleRNN, each with return_state; the GRU's output and its state (the
// same values) both feed the sum.
add({
  name: 'state_encoders',
  build() {
    const series = tf.input({shape: [6, 4], name: 'series'});
    const [gruOut, gruState] = L.gru({units: 4, returnState: true, goBackwards: true, recurrentActivation: 'sigmoid',
                                      name: 'gru'}).apply(series);
    const [, rnnState] = L.simpleRNN({units: 4, returnState: true, activation: 'relu', name: 'rnn'}).apply(series);
    const x = L.add({name: 'sum'}).apply([gruOut, gruState, rnnState]);
    const out = L.dense({units: 1, name: 'forecast'}).apply(x);
    return tf.model({inputs: series, outputs: out, name: 'state_encoders'});
  },
  batch: 3,
});

// 34. A Bidirectional GRU with merge_mode null: the two directions' step
// outputs, multiplied, then pooled.
add({
  name: 'bidi_split',
  build() {
    const series = tf.input({shape: [5, 3], name: 'series'});
    const [fwd, bwd] = L.bidirectional({layer: L.gru({units: 3, returnSequences: true, name: 'gru'}), mergeMode: null,
                                        name: 'bigru'}).apply(series);
    const x = L.multiply({name: 'product'}).apply([fwd, bwd]);
    const pooled = L.globalAveragePooling1d({name: 'pool'}).apply(x);
    const out = L.dense({units: 3, activation: 'softmax', name: 'out'}).apply(pooled);
    return tf.model({inputs: series, outputs: out, name: 'bidi_split'});
  },
  batch: 3,
});

// 35. The other merges and arguments: Bidirectional LSTM averaged and
// Bidirectional SimpleRNN multiplied, a SimpleRNN without bias, dropout
// on the inputs and the state (training only).
add({
  name: 'bidi_merges_dropout',
  build() {
    const series = tf.input({shape: [6, 3], name: 'series'});
    const a = L.bidirectional({layer: L.lstm({units: 3, dropout: 0.2, recurrentDropout: 0.1, name: 'lstm'}),
                               mergeMode: 'ave', name: 'bilstm'}).apply(series);
    const b = L.bidirectional({layer: L.simpleRNN({units: 3, useBias: false, name: 'rnn'}), mergeMode: 'mul',
                               name: 'birnn'}).apply(series);
    const x = L.concatenate({name: 'joined'}).apply([a, b]);
    const out = L.dense({units: 2, activation: 'softmax', name: 'out'}).apply(x);
    return tf.model({inputs: series, outputs: out, name: 'bidi_merges_dropout'});
  },
  batch: 3,
});

module.exports = {cases};
