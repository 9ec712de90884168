// The per-layer cases of layers.json: each one a small Functional model
// (inputs named x, or x1, x2, ...) around the layer(s) it exercises.
'use strict';

const {tf} = require('./golden_lib');

const L = tf.layers;

// An input: a shape (float32, uniform in [-1, 1)) or {shape, dtype, range}
// or {shape, scale, offset}.
function inputOf(s) { return Array.isArray(s) ? {shape: s} : s; }

// A model x -> layers[0] -> layers[1] -> ... (a merge layer first takes all
// the inputs). makers are functions so that each build makes fresh layers.
function chain(name, makers, inputShapes, opts = {}) {
  const ins = inputShapes.map(inputOf);
  return {
    name,
    build() {
      const xs = ins.map((s, i) => tf.input({
        shape: s.shape, dtype: s.dtype || 'float32', name: ins.length === 1 ? 'x' : `x${i + 1}`,
      }));
      let y = xs.length === 1 ? xs[0] : xs;
      for (const make of makers) y = make().apply(y);
      return tf.model({inputs: xs, outputs: y, name});
    },
    inputs: ins.map((s) => ({range: s.range, scale: s.scale, offset: s.offset})),
    note: opts.note,
    batch: opts.batch,
    noGrads: opts.noGrads,
    minTolerance: opts.minTolerance,
    minToleranceWhy: opts.minToleranceWhy,
  };
}

const one = (name, make, inputShapes, opts) => chain(name, [make], inputShapes, opts);

const cases = [];
const add = (c) => cases.push(c);

// --- Dense and activations --------------------------------------------------
// TF.js' activation identifiers (camelCase) and the Keras names toJSON writes.
const ACTIVATIONS = [
  ['relu', 'relu'], ['tanh', 'tanh'], ['sigmoid', 'sigmoid'], ['softmax', 'softmax'],
  ['linear', 'linear'], ['elu', 'elu'], ['selu', 'selu'], ['softplus', 'softplus'],
  ['softsign', 'softsign'], ['swish', 'swish'], ['gelu', 'gelu'], ['hardSigmoid', 'hard_sigmoid'],
];
// Also in TF.js (and Keras): exercised through the Activation layer only.
const EXTRA_ACTIVATIONS = [['relu6', 'relu6'], ['mish', 'mish'], ['logSoftmax', 'log_softmax']];

const ACT_NOTES = {
  hard_sigmoid: 'TF.js hard_sigmoid is clip(0.2*x + 0.5, 0, 1) (Keras 2); Keras 3 uses relu6(x + 3) / 6',
  gelu: 'TF.js gelu is the exact form 0.5*x*(1 + erf(x/sqrt(2))) (Keras approximate=False)',
  swish: 'x * sigmoid(x)',
  elu: 'alpha 1',
};

for (const [id, keras] of ACTIVATIONS) {
  add(one(`dense_${keras}`, () => L.dense({units: 4, activation: id, name: 'd1'}), [{shape: [5], scale: 2}],
    {note: ACT_NOTES[keras]}));
}
add(one('dense_default_activation', () => L.dense({units: 3, name: 'd1'}), [[4]],
  {note: 'no activation argument: TF.js writes "linear"'}));
add(one('dense_no_bias', () => L.dense({units: 3, useBias: false, activation: 'relu', name: 'd1'}), [[4]]));
add(one('dense_rank3', () => L.dense({units: 4, activation: 'tanh', name: 'd1'}), [[3, 5]],
  {note: 'Dense on a rank-3 input acts on the last axis'}));
add(chain('dense_stack', [() => L.dense({units: 6, activation: 'relu', name: 'd1'}),
  () => L.dense({units: 3, activation: 'softmax', name: 'd2'})], [[5]], {batch: 3}));

for (const [id, keras] of [...ACTIVATIONS, ...EXTRA_ACTIVATIONS]) {
  const extra = EXTRA_ACTIVATIONS.some(([, k]) => k === keras);
  const notes = [ACT_NOTES[keras], extra ? 'not in the brief\'s list; TF.js has it' : undefined].filter(Boolean);
  add(one(`activation_${keras}`, () => L.activation({activation: id, name: 'act'}), [{shape: [7], scale: 4}],
    {note: notes.join('; ') || undefined}));
}
add(one('activation_softmax_rank3', () => L.activation({activation: 'softmax', name: 'act'}), [{shape: [3, 4], scale: 3}],
  {note: 'softmax over the last axis'}));

// --- Core ---------------------------------------------------------------------
add(one('embedding', () => L.embedding({inputDim: 10, outputDim: 3, name: 'emb'}),
  [{shape: [6], dtype: 'int32', range: [0, 10]}], {batch: 3,
    note: 'indices repeat, so the embeddings gradient adds several rows of r'}));
add(chain('embedding_flatten_dense', [() => L.embedding({inputDim: 7, outputDim: 4, name: 'emb'}),
  () => L.flatten({name: 'flat'}), () => L.dense({units: 2, name: 'd1'})],
[{shape: [3], dtype: 'int32', range: [0, 7]}]));
add(one('embedding_mask_zero', () => L.embedding({inputDim: 5, outputDim: 2, maskZero: true, name: 'emb'}),
  [{shape: [4], dtype: 'int32', range: [0, 5]}],
  {note: 'mask_zero only adds a mask for later layers; the output is the plain lookup'}));
add(one('flatten_rank3', () => L.flatten({name: 'flat'}), [[3, 4]]));
add(one('flatten_rank4', () => L.flatten({name: 'flat'}), [[2, 3, 2]]));
add(one('reshape', () => L.reshape({targetShape: [2, 3], name: 'resh'}), [[6]]));
add(one('reshape_rank4', () => L.reshape({targetShape: [3, 2, 2], name: 'resh'}), [[4, 3]]));
add(one('reshape_infer', () => L.reshape({targetShape: [-1, 3], name: 'resh'}), [[2, 6]],
  {note: 'target_shape [-1, 3]: TF.js writes the -1 as null'}));
add(one('dropout', () => L.dropout({rate: 0.5, name: 'drop'}), [[5]],
  {note: 'inference mode (training=false): the identity'}));
add(chain('dense_dropout_dense', [() => L.dense({units: 6, activation: 'relu', name: 'd1'}),
  () => L.dropout({rate: 0.3, name: 'drop'}), () => L.dense({units: 2, name: 'd2'})], [[4]],
{note: 'Dropout in inference mode (training=false): the identity'}));

// --- BatchNormalization (inference: the moving statistics) -------------------
const BN_NOTE = 'inference mode: (x - moving_mean) / sqrt(moving_variance + epsilon) * gamma + beta';
add(one('batchnorm_dense', () => L.batchNormalization({name: 'bn'}), [[5]], {batch: 3, note: BN_NOTE}));
add(one('batchnorm_conv', () => L.batchNormalization({name: 'bn'}), [[3, 3, 4]], {note: BN_NOTE}));
add(one('batchnorm_no_center_scale', () => L.batchNormalization({center: false, scale: false, epsilon: 0.01, name: 'bn'}),
  [[4]], {batch: 3, note: BN_NOTE + '; no gamma or beta: only the moving statistics',
    noGrads: 'no grads: TF.js 4.22 cannot differentiate batchNorm without both gamma and beta'}));
add(one('batchnorm_momentum_epsilon', () => L.batchNormalization({momentum: 0.9, epsilon: 1e-5, name: 'bn'}),
  [[2, 3]], {note: BN_NOTE + '; momentum only matters in training'}));

// --- Convolutions -------------------------------------------------------------
add(one('conv2d_valid', () => L.conv2d({filters: 4, kernelSize: 3, name: 'conv'}), [[6, 6, 3]]));
add(one('conv2d_same_relu', () => L.conv2d({filters: 3, kernelSize: 3, padding: 'same', activation: 'relu', name: 'conv'}), [[5, 5, 2]]));
add(one('conv2d_strides2_same', () => L.conv2d({filters: 3, kernelSize: 3, strides: 2, padding: 'same', name: 'conv'}), [[7, 7, 2]],
  {note: 'odd input with stride 2 and same padding: TF pads 1 before and 1 after'}));
add(one('conv2d_strides2_same_even', () => L.conv2d({filters: 2, kernelSize: 3, strides: 2, padding: 'same', name: 'conv'}), [[6, 6, 2]],
  {note: 'even input with stride 2 and same padding: TF pads 0 before and 1 after'}));
add(one('conv2d_strides2_valid', () => L.conv2d({filters: 3, kernelSize: 3, strides: 2, name: 'conv'}), [[7, 7, 2]]));
add(one('conv2d_dilation2', () => L.conv2d({filters: 2, kernelSize: 3, dilationRate: 2, name: 'conv'}), [[7, 7, 2]],
  {noGrads: 'no grads: TF.js 4.22 has no gradient for conv2d with dilation rates above 1'}));
add(one('conv2d_dilation2_same', () => L.conv2d({filters: 2, kernelSize: 3, dilationRate: 2, padding: 'same', name: 'conv'}), [[6, 6, 1]],
  {noGrads: 'no grads: TF.js 4.22 has no gradient for conv2d with dilation rates above 1'}));
add(one('conv2d_no_bias', () => L.conv2d({filters: 3, kernelSize: 2, useBias: false, name: 'conv'}), [[4, 4, 2]]));
add(one('conv2d_rect_kernel', () => L.conv2d({filters: 2, kernelSize: [2, 3], strides: [1, 2], activation: 'tanh', name: 'conv'}), [[5, 7, 2]]));
add(one('conv2d_1x1', () => L.conv2d({filters: 5, kernelSize: 1, name: 'conv'}), [[3, 3, 4]]));
// 3x3 "same" with 16 or 32 channels: the runtime's own Winograd kernels
// (services/tensor/conv2d_winograd.h; 4x4 tiles, part-empty ones at 7x5),
// and with 32 -> 32 over 10x10 oneDNN's (services/tensor/conv2d.h).
const winograd = {
  minTolerance: [1e-4, 1e-5],
  minToleranceWhy: 'the runtime computes this layer with Winograd F(4x4, 3x3), whose kernel gradient sums ' +
    'transformed terms up to 1600x the inputs\' size and rounds to about 1e-5 of the gradient (measured: ' +
    'up to 1.6x the one-ulp tolerance), as TensorFlow\'s Winograd kernels do',
};
add(one('conv2d_same_c16_winograd', () => L.conv2d({filters: 16, kernelSize: 3, padding: 'same', name: 'conv'}), [[8, 8, 16]], winograd));
add(one('conv2d_same_c32_f16_winograd_odd', () => L.conv2d({filters: 16, kernelSize: 3, padding: 'same', useBias: false, name: 'conv'}), [[7, 5, 32]], winograd));
add(one('conv2d_same_c32_f32_onednn_winograd', () => L.conv2d({filters: 32, kernelSize: 3, padding: 'same', activation: 'relu', name: 'conv'}), [[10, 10, 32]], {batch: 1}));

add(one('conv1d_valid', () => L.conv1d({filters: 3, kernelSize: 3, name: 'conv'}), [[8, 2]]));
add(one('conv1d_same', () => L.conv1d({filters: 3, kernelSize: 3, padding: 'same', activation: 'relu', name: 'conv'}), [[7, 2]]));
add(one('conv1d_strides2', () => L.conv1d({filters: 2, kernelSize: 3, strides: 2, name: 'conv'}), [[9, 3]]));
add(one('conv1d_dilation2', () => L.conv1d({filters: 2, kernelSize: 2, dilationRate: 2, name: 'conv'}), [[8, 2]],
  {noGrads: 'no grads: TF.js 4.22 has no gradient for conv2d (which Conv1D uses) with dilation rates above 1'}));
add(one('conv1d_no_bias', () => L.conv1d({filters: 2, kernelSize: 1, useBias: false, name: 'conv'}), [[5, 3]]));

add(one('depthwise_conv2d', () => L.depthwiseConv2d({kernelSize: 3, name: 'dw'}), [[5, 5, 3]]));
add(one('depthwise_conv2d_mult2_same', () => L.depthwiseConv2d({kernelSize: 3, depthMultiplier: 2, padding: 'same', name: 'dw'}), [[4, 4, 2]],
  {note: 'output channel c*2+m comes from input channel c and multiplier m'}));
add(one('depthwise_conv2d_strides2_relu', () => L.depthwiseConv2d({kernelSize: 3, strides: 2, padding: 'same', activation: 'relu', name: 'dw'}), [[6, 6, 2]]));
add(one('depthwise_conv2d_no_bias', () => L.depthwiseConv2d({kernelSize: 2, useBias: false, name: 'dw'}), [[4, 4, 3]]));

add(one('separable_conv2d', () => L.separableConv2d({filters: 4, kernelSize: 3, name: 'sep'}), [[5, 5, 3]]));
add(one('separable_conv2d_mult2_same_relu', () => L.separableConv2d({filters: 3, kernelSize: 3, depthMultiplier: 2, padding: 'same', activation: 'relu', name: 'sep'}), [[4, 4, 2]],
  {note: 'TF.js writes no depth_multiplier for SeparableConv2D: it is the last dimension of depthwise_kernel [kh, kw, in, 2]'}));
add(one('separable_conv2d_strides2_no_bias', () => L.separableConv2d({filters: 2, kernelSize: 3, strides: 2, useBias: false, name: 'sep'}), [[7, 7, 2]]));

add(one('conv2d_transpose_valid', () => L.conv2dTranspose({filters: 3, kernelSize: 3, name: 'convt'}), [[3, 3, 2]],
  {note: 'kernel shape [kh, kw, filters, in_channels]'}));
add(one('conv2d_transpose_strides2_same', () => L.conv2dTranspose({filters: 2, kernelSize: 3, strides: 2, padding: 'same', name: 'convt'}), [[3, 3, 2]]));
add(one('conv2d_transpose_strides2_valid', () => L.conv2dTranspose({filters: 2, kernelSize: 3, strides: 2, activation: 'relu', name: 'convt'}), [[3, 3, 2]]));
add(one('conv2d_transpose_k2_s2_no_bias', () => L.conv2dTranspose({filters: 2, kernelSize: 2, strides: 2, useBias: false, name: 'convt'}), [[2, 3, 3]]));

// --- Pooling ------------------------------------------------------------------
add(one('max_pooling2d', () => L.maxPooling2d({poolSize: 2, name: 'pool'}), [[4, 4, 2]]));
add(one('max_pooling2d_odd', () => L.maxPooling2d({poolSize: 2, name: 'pool'}), [[5, 5, 2]],
  {note: 'valid padding drops the last row and column'}));
add(one('max_pooling2d_3_strides2_same', () => L.maxPooling2d({poolSize: 3, strides: 2, padding: 'same', name: 'pool'}), [[5, 5, 2]]));
add(one('max_pooling2d_strides1', () => L.maxPooling2d({poolSize: [2, 2], strides: [1, 1], name: 'pool'}), [[3, 4, 2]]));
add(one('average_pooling2d', () => L.averagePooling2d({poolSize: 2, name: 'pool'}), [[4, 4, 2]]));
add(one('average_pooling2d_3_strides2_same', () => L.averagePooling2d({poolSize: 3, strides: 2, padding: 'same', name: 'pool'}), [[5, 5, 2]],
  {note: 'same padding: the average is over the window elements inside the input only',
    noGrads: 'no grads: TF.js 4.22\'s avgPool gradient with same padding divides by the full window size while its forward divides by the in-input count, so its gradient is not the forward\'s'}));
add(one('average_pooling2d_rect', () => L.averagePooling2d({poolSize: [1, 2], strides: [1, 2], name: 'pool'}), [[3, 4, 2]]));
add(one('global_average_pooling2d', () => L.globalAveragePooling2d({name: 'gap'}), [[3, 4, 3]]));
add(one('global_max_pooling2d', () => L.globalMaxPooling2d({name: 'gmp'}), [[3, 4, 3]]));
add(one('max_pooling1d', () => L.maxPooling1d({poolSize: 2, name: 'pool'}), [[6, 3]]));
add(one('max_pooling1d_3_strides2_same', () => L.maxPooling1d({poolSize: 3, strides: 2, padding: 'same', name: 'pool'}), [[7, 2]]));
add(one('average_pooling1d', () => L.averagePooling1d({poolSize: 2, name: 'pool'}), [[6, 3]]));
add(one('average_pooling1d_3_strides2_same', () => L.averagePooling1d({poolSize: 3, strides: 2, padding: 'same', name: 'pool'}), [[6, 2]],
  {note: 'same padding: the average is over the window elements inside the input only',
    noGrads: 'no grads: TF.js 4.22\'s avgPool gradient with same padding divides by the full window size while its forward divides by the in-input count, so its gradient is not the forward\'s'}));
add(one('global_max_pooling1d', () => L.globalMaxPooling1d({name: 'gmp'}), [[5, 3]]));
add(one('global_average_pooling1d', () => L.globalAveragePooling1d({name: 'gap'}), [[5, 3]]));

// --- Padding, cropping, upsampling --------------------------------------------
add(one('zero_padding2d', () => L.zeroPadding2d({padding: 1, name: 'pad'}), [[2, 3, 2]]));
add(one('zero_padding2d_asym', () => L.zeroPadding2d({padding: [[1, 2], [0, 1]], name: 'pad'}), [[2, 3, 2]],
  {note: 'padding [[top, bottom], [left, right]]'}));
add(one('zero_padding2d_hw', () => L.zeroPadding2d({padding: [2, 1], name: 'pad'}), [[2, 2, 1]],
  {note: 'padding [2, 1]: 2 rows above and below, 1 column left and right'}));
add(one('cropping2d', () => L.cropping2D({cropping: 1, name: 'crop'}), [[4, 5, 2]]));
add(one('cropping2d_asym', () => L.cropping2D({cropping: [[1, 0], [0, 2]], name: 'crop'}), [[4, 5, 2]],
  {note: 'cropping [[top, bottom], [left, right]]'}));
const NEAREST = {batch: 1, note: 'batch 1: TF.js 4.22\'s CPU gradient of resizeNearestNeighbor is wrong for batch > 1 ' +
  '(it reads the wrong part of the upstream gradient for every batch element after the first)'};
add(one('up_sampling2d', () => L.upSampling2d({size: [2, 2], name: 'up'}), [[2, 3, 2]], NEAREST));
add(one('up_sampling2d_rect', () => L.upSampling2d({size: [2, 3], name: 'up'}), [[2, 2, 2]], NEAREST));
add(one('up_sampling2d_bilinear', () => L.upSampling2d({size: [2, 2], interpolation: 'bilinear', name: 'up'}), [[3, 3, 1]],
  {note: 'TF.js semantics, not Keras 3: tf.image.resizeBilinear with align_corners false and half_pixel_centers false ' +
    '(source pixel = out * in / out_size, TF1\'s legacy mapping); Keras 3 and TF2\'s tf.image.resize use half-pixel centers'}));

// --- Merge --------------------------------------------------------------------
add(one('add', () => L.add({name: 'add'}), [[4], [4]]));
add(one('add3', () => L.add({name: 'add'}), [[2, 3], [2, 3], [2, 3]]));
add(one('multiply', () => L.multiply({name: 'mul'}), [[4], [4]]));
add(one('multiply3', () => L.multiply({name: 'mul'}), [[3], [3], [3]]));
add(one('average', () => L.average({name: 'avg'}), [[4], [4]]));
add(one('maximum', () => L.maximum({name: 'max'}), [[5], [5]]));
add(one('maximum3', () => L.maximum({name: 'max'}), [[2, 2], [2, 2], [2, 2]]));
add(one('minimum', () => L.minimum({name: 'min'}), [[5], [5]]));
add(one('concatenate', () => L.concatenate({name: 'cat'}), [[3], [4]], {note: 'axis -1 (the default)'}));
add(one('concatenate_axis1', () => L.concatenate({axis: 1, name: 'cat'}), [[2, 3], [4, 3]]));
add(one('concatenate_axis2_rank4', () => L.concatenate({axis: 2, name: 'cat'}), [[2, 1, 2], [2, 3, 2]],
  {note: 'TF.js fails at run time on a negative axis other than -1, so axis 2, not -2'}));
add(one('concatenate3', () => L.concatenate({name: 'cat'}), [[2], [1], [3]]));
add(one('dot_axes1', () => L.dot({axes: 1, name: 'dot'}), [[4], [4]], {batch: 3}));
add(one('dot_normalize', () => L.dot({axes: 1, normalize: true, name: 'dot'}), [[4], [4]], {batch: 3,
  note: 'normalize: both inputs l2-normalized along the axis first (cosine similarity); TF.js divides by sqrt(max(sum(x^2), 1e-12))'}));
add(one('dot_axes_2_2', () => L.dot({axes: [2, 2], name: 'dot'}), [[3, 4], [5, 4]],
  {note: 'batched x1 . x2^T: output [batch, 3, 5]'}));
add(one('dot_axes_1_1_rank3', () => L.dot({axes: [1, 1], name: 'dot'}), [[3, 2], [3, 4]],
  {note: 'batched x1^T . x2: output [batch, 2, 4]'}));

// --- Normalization, rescaling, shape --------------------------------------------
add(one('layer_normalization', () => L.layerNormalization({name: 'ln'}), [{shape: [6], scale: 2, offset: 0.5}]));
add(one('layer_normalization_rank3', () => L.layerNormalization({name: 'ln'}), [[3, 4]], {note: 'axis -1'}));
add(one('layer_normalization_no_center_scale', () => L.layerNormalization({center: false, scale: false, epsilon: 0.01, name: 'ln'}), [[5]], {batch: 3,
  noGrads: 'no grads: TF.js 4.22 cannot differentiate LayerNormalization without both gamma and beta (its batchNorm gradient reads the missing tensors)'}));
add(one('layer_normalization_axis_12', () => L.layerNormalization({axis: [1, 2], name: 'ln'}), [[2, 3]],
  {note: 'axis [1, 2]: statistics over both non-batch axes; gamma and beta have shape [2, 3]'}));
add(one('rescaling', () => L.rescaling({scale: 1 / 255, name: 'rescale'}), [{shape: [4], scale: 127.5, offset: 127.5}],
  {note: 'scale 1/255 is written as the double 0.00392156862745098; TF.js multiplies in float32'}));
add(one('rescaling_offset', () => L.rescaling({scale: 2, offset: -1, name: 'rescale'}), [{shape: [2, 3], scale: 0.5, offset: 0.5}]));
add(one('permute', () => L.permute({dims: [2, 1], name: 'perm'}), [[3, 4]]));
add(one('permute_rank4', () => L.permute({dims: [3, 1, 2], name: 'perm'}), [[2, 3, 4]]));
add(one('repeat_vector', () => L.repeatVector({n: 3, name: 'rep'}), [[4]]));
add(one('spatial_dropout1d', () => L.spatialDropout1d({rate: 0.5, name: 'sdrop'}), [[4, 3]],
  {note: 'inference mode (training=false): the identity'}));
add(one('gaussian_noise', () => L.gaussianNoise({stddev: 0.5, name: 'noise'}), [[5]],
  {note: 'inference mode (training=false): the identity'}));
add(one('gaussian_dropout', () => L.gaussianDropout({rate: 0.3, name: 'gdrop'}), [[5]],
  {note: 'inference mode (training=false): the identity'}));

// --- Advanced activations -------------------------------------------------------
add(one('relu_layer', () => L.reLU({name: 'relu'}), [{shape: [6], scale: 3}]));
add(one('relu_max_value', () => L.reLU({maxValue: 6, name: 'relu'}), [{shape: [8], scale: 9}],
  {note: 'max_value 6: min(max(x, 0), 6)'}));
add(one('leaky_relu', () => L.leakyReLU({alpha: 0.1, name: 'lrelu'}), [{shape: [6], scale: 3}]));
add(one('leaky_relu_default', () => L.leakyReLU({name: 'lrelu'}), [{shape: [6], scale: 3}],
  {note: 'TF.js default alpha 0.3'}));
add(one('prelu', () => L.prelu({name: 'prelu'}), [{shape: [6], scale: 3}], {note: 'alpha has the input\'s shape [6]'}));
add(one('prelu_shared_axes', () => L.prelu({sharedAxes: [1, 2], name: 'prelu'}), [{shape: [3, 3, 2], scale: 3}],
  {note: 'shared_axes [1, 2]: one alpha per channel, shape [1, 1, 2]'}));
add(one('elu_layer_default', () => L.elu({name: 'elu'}), [{shape: [6], scale: 3}], {note: 'alpha 1'}));
add(one('softmax_layer', () => L.softmax({name: 'softmax'}), [{shape: [5], scale: 3}],
  {note: 'TF.js\' default axis is 1 (Keras: -1), written as "axis": 1'}));
add(one('softmax_layer_rank3', () => L.softmax({axis: -1, name: 'softmax'}), [{shape: [3, 4], scale: 3}],
  {note: 'axis -1 of a rank-3 input (TF.js supports only the last axis)'}));
add(one('thresholded_relu', () => L.thresholdedReLU({theta: 0.5, name: 'trelu'}), [{shape: [8], scale: 2}],
  {note: 'x where x > theta, else 0; TF.js has no gradient for its Greater, so the generator registers zero (as TensorFlow treats comparisons): dL/dx = r where x > theta'}));

// --- Preprocessing --------------------------------------------------------------
add(one('category_encoding_one_hot', () => L.categoryEncoding({numTokens: 5, outputMode: 'oneHot', name: 'enc'}),
  [{shape: [1], dtype: 'int32', range: [0, 5]}], {batch: 3, note: 'input [batch, 1] -> [batch, num_tokens]'}));
add(one('category_encoding_multi_hot', () => L.categoryEncoding({numTokens: 6, outputMode: 'multiHot', name: 'enc'}),
  [{shape: [4], dtype: 'int32', range: [0, 6]}], {batch: 3, note: 'repeated tokens still give 1'}));
add(one('category_encoding_count', () => L.categoryEncoding({numTokens: 6, outputMode: 'count', name: 'enc'}),
  [{shape: [5], dtype: 'int32', range: [0, 6]}], {batch: 3}));
add(chain('category_encoding_dense', [() => L.categoryEncoding({numTokens: 4, outputMode: 'count', name: 'enc'}),
  () => L.dense({units: 2, name: 'd1'})], [{shape: [3], dtype: 'int32', range: [0, 4]}]));

// --- Recurrent ------------------------------------------------------------------
// TF.js' defaults: recurrent_activation hard_sigmoid, kernel glorot_normal,
// GRU reset_after false (TF.js has no other form). Inference mode, so
// dropout and recurrent_dropout are the identity.
add(one('simple_rnn', () => L.simpleRNN({units: 3, name: 'rnn'}), [[4, 2]], {note: 'tanh; the last state'}));
add(one('simple_rnn_sequences_relu', () => L.simpleRNN({units: 3, activation: 'relu', returnSequences: true, name: 'rnn'}),
  [[4, 2]], {note: 'relu; every step\'s state, [batch, 4, 3]'}));
add(one('simple_rnn_backwards_no_bias', () => L.simpleRNN({units: 2, goBackwards: true, useBias: false, name: 'rnn'}),
  [[5, 3]], {note: 'go_backwards: the steps run last to first'}));
add(one('lstm', () => L.lstm({units: 3, name: 'lstm'}), [[4, 2]], {note: 'gates i, f, c, o; recurrent_activation hard_sigmoid'}));
add(one('lstm_sigmoid_sequences', () => L.lstm({units: 3, recurrentActivation: 'sigmoid', returnSequences: true, name: 'lstm'}),
  [[5, 2]], {note: 'sigmoid gates, every step\'s state'}));
add(one('lstm_backwards', () => L.lstm({units: 2, goBackwards: true, recurrentActivation: 'sigmoid', name: 'lstm'}),
  [[4, 3]]));
add(one('lstm_backwards_sequences', () => L.lstm({units: 2, goBackwards: true, returnSequences: true, name: 'lstm'}),
  [[3, 2]], {note: 'the outputs in the order the steps ran: output step 0 is input step 2'}));
add(one('lstm_no_bias_relu', () => L.lstm({units: 3, useBias: false, activation: 'relu', recurrentActivation: 'sigmoid',
  unitForgetBias: true, dropout: 0.3, recurrentDropout: 0.2, name: 'lstm'}), [[4, 2]],
  {note: 'relu cell activation, no bias; dropout 0.3 and recurrent_dropout 0.2 are the identity in inference'}));
add(one('gru', () => L.gru({units: 3, name: 'gru'}), [[4, 2]], {note: 'gates z, r, h; reset_after false'}));
add(one('gru_sigmoid_sequences', () => L.gru({units: 3, recurrentActivation: 'sigmoid', returnSequences: true, name: 'gru'}),
  [[5, 2]]));
add(one('gru_backwards_no_bias', () => L.gru({units: 2, goBackwards: true, useBias: false, recurrentActivation: 'sigmoid',
  name: 'gru'}), [[4, 3]]));
add(chain('lstm_gru_dense', [() => L.lstm({units: 4, returnSequences: true, recurrentActivation: 'sigmoid', name: 'lstm'}),
  () => L.gru({units: 3, recurrentActivation: 'sigmoid', name: 'gru'}), () => L.dense({units: 2, name: 'd1'})], [[6, 3]],
  {note: 'a stacked LSTM (sequences) into a GRU into a Dense'}));

add(one('bidirectional_lstm_concat_sequences', () => L.bidirectional({layer: L.lstm({units: 2, returnSequences: true,
  recurrentActivation: 'sigmoid', name: 'lstm'}), name: 'bi'}), [[4, 3]],
  {note: 'concat: forward then backward units; the backward half turned back into input order'}));
add(one('bidirectional_gru_sum', () => L.bidirectional({layer: L.gru({units: 3, name: 'gru'}), mergeMode: 'sum',
  name: 'bi'}), [[4, 2]], {note: 'the last states of both directions, summed'}));
add(one('bidirectional_simple_rnn_mul', () => L.bidirectional({layer: L.simpleRNN({units: 3, name: 'rnn'}),
  mergeMode: 'mul', name: 'bi'}), [[3, 2]]));
add(one('bidirectional_lstm_ave_sequences', () => L.bidirectional({layer: L.lstm({units: 2, returnSequences: true,
  name: 'lstm'}), mergeMode: 'ave', name: 'bi'}), [[3, 2]]));
add(one('time_distributed_dense', () => L.timeDistributed({layer: L.dense({units: 3, activation: 'tanh', name: 'd1'}),
  name: 'td'}), [[4, 2]], {note: 'one Dense on every time step; TF.js names its weights td/kernel, td/bias'}));
add(chain('lstm_time_distributed', [() => L.lstm({units: 3, returnSequences: true, recurrentActivation: 'sigmoid', name: 'lstm'}),
  () => L.timeDistributed({layer: L.dense({units: 2, name: 'd1'}), name: 'td'})], [[5, 2]]));

// Masks: padded steps neither update the state nor count. Embedding
// (mask_zero) makes the mask from id 0 (drawn among the ids), Masking from
// all-zero steps (zeroSteps).
add(chain('embedding_mask_lstm', [() => L.embedding({inputDim: 4, outputDim: 3, maskZero: true, name: 'emb'}),
  () => L.lstm({units: 3, recurrentActivation: 'sigmoid', name: 'lstm'})], [{shape: [6], dtype: 'int32', range: [0, 4]}],
  {batch: 3, note: 'ids 0 are padding: the LSTM skips those steps, its state carried over them'}));
add(chain('embedding_mask_gru_sequences', [() => L.embedding({inputDim: 4, outputDim: 2, maskZero: true, name: 'emb'}),
  () => L.gru({units: 2, returnSequences: true, name: 'gru'})], [{shape: [5], dtype: 'int32', range: [0, 4]}],
  {batch: 3, note: 'a padded step\'s output is the state carried from the last real step'}));
add(chain('masking_simple_rnn', [() => L.masking({maskValue: 0, name: 'mask'}),
  () => L.simpleRNN({units: 3, name: 'rnn'})], [{shape: [5, 2], zeroSteps: [[0, 1], [0, 4], [1, 0]]}],
  {note: 'steps (0, 1), (0, 4) and (1, 0) are all zero, so masked'}));
add(chain('masking_dense_bidirectional', [() => L.masking({maskValue: 0, name: 'mask'}),
  () => L.dense({units: 3, activation: 'tanh', name: 'd1'}),
  () => L.bidirectional({layer: L.lstm({units: 2, recurrentActivation: 'sigmoid', name: 'lstm'}), name: 'bi'})],
  [{shape: [4, 2], zeroSteps: [[0, 3], [1, 1]]}], {note: 'the mask passes through Dense to both directions'}));

module.exports = {cases, ACTIVATIONS};
