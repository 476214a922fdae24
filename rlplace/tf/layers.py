"""Neural-network blocks of the zoo builders, written with ``tf.compat.v1`` variables so that
weights are graph ops. Sequence models work on 2-D ``[batch * length, width]`` matrices where
they can (as BERT's reference code does) to keep reshapes out of the graph."""

from __future__ import annotations

import math

import tensorflow as tf

v1 = tf.compat.v1


def dense(x: tf.Tensor, units: int, name: str, activation=None, use_bias: bool = True) -> tf.Tensor:
    """``x @ kernel + bias`` on a 2-D input."""
    with v1.variable_scope(name):
        kernel = v1.get_variable("kernel", [x.shape[-1], units])
        y = tf.matmul(x, kernel)
        if use_bias:
            y = tf.nn.bias_add(y, v1.get_variable("bias", [units], initializer=v1.zeros_initializer()))
        return activation(y) if activation is not None else y


def conv_bn_relu(x: tf.Tensor, filters: int, kernel: int | tuple[int, int], name: str,
                 stride: int = 1, padding: str = "SAME", relu: bool = True) -> tf.Tensor:
    """Convolution, batch normalisation in training mode (learned shift, as in TF-slim's
    Inception-V3) and ReLU. NHWC."""
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    with v1.variable_scope(name):
        weights = v1.get_variable("weights", [kh, kw, x.shape[-1], filters])
        y = tf.nn.conv2d(x, weights, strides=[1, stride, stride, 1], padding=padding)
        beta = v1.get_variable("beta", [filters], initializer=v1.zeros_initializer())
        y, _, _ = v1.nn.fused_batch_norm(y, scale=tf.constant(1.0, shape=[filters]), offset=beta,
                                          epsilon=1e-3, is_training=True)
        return tf.nn.relu(y) if relu else y


def pooled_logits(x: tf.Tensor, classes: int, name: str) -> tf.Tensor:
    """Class logits from a ``[B, 1, 1, C]`` map: TF-slim's 1x1 convolution with bias, as the
    equivalent matrix product (TensorFlow's oneDNN pass would fuse a convolution with its bias
    into one op under the bias's name, hiding the convolution from the profile)."""
    return dense(tf.squeeze(x, [1, 2]), classes, name)


def zeros_matrix(rows: int, cols: int) -> tf.Tensor:
    """A ``Fill`` op at every size (``tf.zeros`` makes small ones constants, so the graph's ops
    would depend on the batch size)."""
    return tf.fill([rows, cols], 0.0)


class LSTM:
    """One LSTM layer (gates i, j, f, o; forget bias 1), stepped by hand so that an unrolled
    sequence is plain graph ops (no while loop); its weights are shared by all steps."""

    def __init__(self, name: str, input_size: int, units: int):
        with v1.variable_scope(name):
            self.kernel = v1.get_variable("kernel", [input_size + units, 4 * units])
            self.bias = v1.get_variable("bias", [4 * units], initializer=v1.zeros_initializer())
        self.name = name
        self.units = units

    def zero_state(self, batch: int) -> tuple[tf.Tensor, tf.Tensor]:
        zeros = zeros_matrix(batch, self.units)
        return zeros, zeros

    def __call__(self, x: tf.Tensor, state: tuple[tf.Tensor, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        h, c = state
        gates = tf.nn.bias_add(tf.matmul(tf.concat([x, h], 1), self.kernel), self.bias)
        i, j, f, o = tf.split(gates, 4, axis=1)
        c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
        return tf.sigmoid(o) * tf.tanh(c), c


class BahdanauAttention:
    """Additive attention (Bahdanau et al. 2015): ``score = v . tanh(W_k k + W_q q)`` over the
    memory; the keys are projected once per step of training."""

    def __init__(self, name: str, memory: tf.Tensor, query_size: int, units: int):
        batch, length, width = memory.shape
        with v1.variable_scope(name):
            keys = dense(tf.reshape(memory, [batch * length, width]), units, "memory_layer",
                         use_bias=False)
            self.keys = tf.reshape(keys, [batch, length, units])
            self.query_kernel = v1.get_variable("query_kernel", [query_size, units])
            self.v = v1.get_variable("attention_v", [units])
        self.memory = memory

    def __call__(self, query: tf.Tensor) -> tf.Tensor:
        q = tf.expand_dims(tf.matmul(query, self.query_kernel), 1)
        scores = tf.reduce_sum(self.v * tf.tanh(self.keys + q), axis=2)
        weights = tf.expand_dims(tf.nn.softmax(scores), 1)
        return tf.squeeze(tf.matmul(weights, self.memory), 1)


def layer_norm(x: tf.Tensor, name: str) -> tf.Tensor:
    with v1.variable_scope(name):
        width = x.shape[-1]
        gamma = v1.get_variable("gamma", [width], initializer=v1.ones_initializer())
        beta = v1.get_variable("beta", [width], initializer=v1.zeros_initializer())
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + 1e-6) * gamma + beta


def gelu(x: tf.Tensor) -> tf.Tensor:
    """The tanh approximation of BERT's reference code (``x * x * x``: the gradient of ``x ** 3``
    would hold batch-size-dependent ``zeros_like`` ops)."""
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def multi_head_attention(query: tf.Tensor, memory: tf.Tensor, batch: int, heads: int, name: str,
                         bias: tf.Tensor | None = None) -> tf.Tensor:
    """Scaled dot-product attention with ``heads`` heads (Vaswani et al. 2017). ``query`` is
    ``[batch * Tq, D]``, ``memory`` ``[batch * Tk, D]``; ``bias`` (``[Tq, Tk]``) is added to the
    logits (a causal mask)."""
    width = query.shape[-1]
    size = width // heads
    tq, tk = query.shape[0] // batch, memory.shape[0] // batch

    def split_heads(x: tf.Tensor, length: int) -> tf.Tensor:
        return tf.transpose(tf.reshape(x, [batch, length, heads, size]), [0, 2, 1, 3])

    with v1.variable_scope(name):
        q = split_heads(dense(query, width, "query"), tq)
        k = split_heads(dense(memory, width, "key"), tk)
        v = split_heads(dense(memory, width, "value"), tk)
        logits = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(size))
        if bias is not None:
            logits += bias
        context = tf.matmul(tf.nn.softmax(logits), v)
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [batch * tq, width])
        return dense(context, width, "output")


def causal_bias(length: int) -> tf.Tensor:
    """``[length, length]``: 0 where a position may attend, -1e9 where it would see the future."""
    mask = tf.linalg.band_part(tf.ones([length, length]), -1, 0)
    return (1.0 - mask) * -1e9
