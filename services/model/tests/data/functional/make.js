// Writes the small Functional models services/model/tests/functional_test.cc reads.
const tf = require('@tensorflow/tfjs');
const fs = require('fs');
const out = process.argv[2];
{
  const a = tf.input({shape: [4], name: 'dense_in'});
  const b = tf.input({shape: [3], name: 'ids', dtype: 'int32'});
  const emb = tf.layers.embedding({inputDim: 10, outputDim: 2, name: 'emb'}).apply(b);
  const fl = tf.layers.flatten({name: 'flat'}).apply(emb);
  const shared = tf.layers.dense({units: 5, activation: 'tanh', name: 'shared'});
  const h1 = shared.apply(a);
  const h2 = shared.apply(tf.layers.dense({units: 4, name: 'pre'}).apply(a));
  const s = tf.layers.add({name: 'sum'}).apply([h1, h2]);
  const c = tf.layers.concatenate({name: 'cat'}).apply([s, fl]);
  const o = tf.layers.dense({units: 3, activation: 'softmax', name: 'out'}).apply(c);
  fs.writeFileSync(out + '/two_inputs_shared.json', JSON.stringify(tf.model({inputs: [a, b], outputs: o, name: 'wide'}).toJSON(null, false), null, 1) + '\n');
}
{
  const a = tf.input({shape: [6], name: 'x'});
  const d1 = tf.layers.dense({units: 6, activation: 'relu', name: 'd1', kernelInitializer: 'heNormal'}).apply(a);
  const r = tf.layers.add({name: 'res'}).apply([a, d1]);
  const m = tf.layers.multiply({name: 'gate'}).apply([r, tf.layers.dense({units: 6, activation: 'sigmoid', name: 'g'}).apply(a)]);
  const sub = tf.layers.add({name: 'sub'}).apply([m, a]);
  const av = tf.layers.average({name: 'avg'}).apply([sub, r, m]);
  const mx = tf.layers.maximum({name: 'max'}).apply([av, sub]);
  const mn = tf.layers.minimum({name: 'min'}).apply([mx, r]);
  const o = tf.layers.dense({units: 2, name: 'o', kernelInitializer: 'leCunUniform', biasInitializer: 'ones'}).apply(mn);
  fs.writeFileSync(out + '/merges.json', JSON.stringify(tf.model({inputs: a, outputs: o, name: 'merges'}).toJSON(null, false), null, 1) + '\n');
}
{
  const a = tf.input({shape: [4], name: 'a'});
  const b = tf.input({shape: [4], name: 'b'});
  const t = tf.layers.dense({units: 3, name: 'tower'});
  const o1 = tf.layers.dense({units: 1, name: 'o1'}).apply(t.apply(a));
  const o2 = tf.layers.dense({units: 1, name: 'o2'}).apply(t.apply(b));
  fs.writeFileSync(out + '/two_outputs.json', JSON.stringify(tf.model({inputs: [a, b], outputs: [o1, o2], name: 'two'}).toJSON(null, false), null, 1) + '\n');
}
