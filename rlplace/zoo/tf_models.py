"""The benchmark models of the four papers as TensorFlow training graphs (graph mode).

One function per model; each returns a ``TFModel`` whose ``train_op`` runs one training step
(forward, backward, optimizer update). The defaults are the papers' sizes; ``rlplace/conf/model/*.yaml``
holds CPU sizes that run in seconds. ``layer`` tags give the expert placements of the
Hierarchical Planner paper (§4): for GNMT one LSTM layer per device, the embedding with the
first layer, attention and softmax with the last; the CNNs carry no tags (one device). The
Transformer and BERT are tagged the same way (layer ``i`` of the encoder and decoder, embedding
first, output head last), a layer-wise split for placers that want one.

Importing this module imports TensorFlow; ``rlplace.zoo.build_tf_model`` imports it lazily.
"""

from __future__ import annotations

import tensorflow as tf

from rlplace.errors import ConfigError
from rlplace.tf.builder import ModelBuilder, TFModel
from rlplace.tf.layers import (LSTM, BahdanauAttention, causal_bias, conv_bn_relu, pooled_logits,
                               dense, gelu, layer_norm, multi_head_attention, zeros_matrix)

v1 = tf.compat.v1


def _need(condition: bool, model: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"model {model}: {message}")


def _xent(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


# ------------------------------------------------------------------------ linear regression
def linear_regression(batch_size: int = 128, features: int = 1024,
                      learning_rate: float = 0.01) -> TFModel:
    """Baechi Fig. 2: ``y = X w`` trained with SGD whose learning rate decays with the global
    step (so the step variable feeds the update, the cycle example of Baechi §3.1)."""
    with ModelBuilder("linear_regression", batch_size) as b:
        x = b.placeholder("X", (batch_size, features))
        y = b.placeholder("Y", (batch_size, 1))
        w = v1.get_variable("Weight", [features, 1])
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        return b.finish(loss, lambda step: v1.train.GradientDescentOptimizer(
            v1.train.exponential_decay(learning_rate, step, 1000, 0.96)))


# ------------------------------------------------------------------------ Inception-V3
def inception_v3(batch_size: int = 32, image_size: int = 299, num_classes: int = 1000,
                 depth_multiplier: float = 1.0, aux_logits: bool = True,
                 learning_rate: float = 0.045) -> TFModel:
    """Inception-V3 (Szegedy et al. 2016) as in TF-slim, trained with RMSProp (decay 0.9,
    momentum 0.9, epsilon 1.0). Paper sizes: Baechi batch 32 and 64, image 299, 1000 classes;
    Hierarchical Planner and Mars batch 1; Celeritas batch 512. ``depth_multiplier`` scales
    every layer's channels (at least 16, as slim's ``min_depth``); images down to 75 pixels."""
    _need(image_size >= 75, "inception_v3", f"image_size must be >= 75, got {image_size}")

    def d(channels: int) -> int:
        return max(int(channels * depth_multiplier), 16)

    def pool(x, kind, k, stride, padding, name):
        fn = tf.nn.max_pool2d if kind == "max" else tf.nn.avg_pool2d
        return fn(x, k, stride, padding, name=name)

    def block(x, name, branches):
        """branches: lists of (channels, kernel, stride, padding) convolutions, or a
        ("pool", kind) head followed by convolutions; a list inside a branch splits it."""
        outs = []
        with v1.variable_scope(name):
            for bi, branch in enumerate(branches):
                y = x
                for li, layer in enumerate(branch):
                    scope = f"Branch_{bi}_{li}"
                    if layer[0] == "pool":
                        _, kind, k, stride, padding = layer
                        y = pool(y, kind, k, stride, padding, scope)
                    elif isinstance(layer[0], tuple):  # parallel convolutions, concatenated
                        y = tf.concat([conv_bn_relu(y, d(c), k, f"{scope}_{j}", s, p)
                                       for j, (c, k, s, p) in enumerate(layer)], 3)
                    else:
                        c, k, s, p = layer
                        y = conv_bn_relu(y, d(c), k, scope, s, p)
                outs.append(y)
            return tf.concat(outs, 3)

    def mixed_5(x, name, pool_channels):
        return block(x, name, [[(64, 1, 1, "SAME")],
                               [(48, 1, 1, "SAME"), (64, 5, 1, "SAME")],
                               [(64, 1, 1, "SAME"), (96, 3, 1, "SAME"), (96, 3, 1, "SAME")],
                               [("pool", "avg", 3, 1, "SAME"), (pool_channels, 1, 1, "SAME")]])

    def mixed_6(x, name, c):
        return block(x, name, [[(192, 1, 1, "SAME")],
                               [(c, 1, 1, "SAME"), (c, (1, 7), 1, "SAME"), (192, (7, 1), 1, "SAME")],
                               [(c, 1, 1, "SAME"), (c, (7, 1), 1, "SAME"), (c, (1, 7), 1, "SAME"),
                                (c, (7, 1), 1, "SAME"), (192, (1, 7), 1, "SAME")],
                               [("pool", "avg", 3, 1, "SAME"), (192, 1, 1, "SAME")]])

    def mixed_7(x, name):
        split = ((384, (1, 3), 1, "SAME"), (384, (3, 1), 1, "SAME"))
        return block(x, name, [[(320, 1, 1, "SAME")],
                               [(384, 1, 1, "SAME"), split],
                               [(448, 1, 1, "SAME"), (384, 3, 1, "SAME"), split],
                               [("pool", "avg", 3, 1, "SAME"), (192, 1, 1, "SAME")]])

    with ModelBuilder("inception_v3", batch_size) as b:
        images = b.placeholder("images", (batch_size, image_size, image_size, 3))
        labels = b.placeholder("labels", (batch_size,), "int32", high=num_classes)
        with v1.variable_scope("InceptionV3"):
            x = conv_bn_relu(images, d(32), 3, "Conv2d_1a_3x3", 2, "VALID")
            x = conv_bn_relu(x, d(32), 3, "Conv2d_2a_3x3", 1, "VALID")
            x = conv_bn_relu(x, d(64), 3, "Conv2d_2b_3x3")
            x = pool(x, "max", 3, 2, "VALID", "MaxPool_3a_3x3")
            x = conv_bn_relu(x, d(80), 1, "Conv2d_3b_1x1", 1, "VALID")
            x = conv_bn_relu(x, d(192), 3, "Conv2d_4a_3x3", 1, "VALID")
            x = pool(x, "max", 3, 2, "VALID", "MaxPool_5a_3x3")
            x = mixed_5(x, "Mixed_5b", 32)
            x = mixed_5(x, "Mixed_5c", 64)
            x = mixed_5(x, "Mixed_5d", 64)
            x = block(x, "Mixed_6a", [[(384, 3, 2, "VALID")],
                                      [(64, 1, 1, "SAME"), (96, 3, 1, "SAME"), (96, 3, 2, "VALID")],
                                      [("pool", "max", 3, 2, "VALID")]])
            for name, c in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
                x = mixed_6(x, name, c)
            loss = 0.0
            if aux_logits:
                with v1.variable_scope("AuxLogits"):
                    k = min(5, x.shape[1])
                    aux = pool(x, "avg", k, 3, "VALID", "AvgPool_1a_5x5")
                    aux = conv_bn_relu(aux, d(128), 1, "Conv2d_1b_1x1")
                    aux = conv_bn_relu(aux, d(768), aux.shape[1], "Conv2d_2a_5x5", 1, "VALID")
                    loss = 0.4 * _xent(pooled_logits(aux, num_classes, "Conv2d_2b_1x1"), labels)
            x = block(x, "Mixed_7a", [[(192, 1, 1, "SAME"), (320, 3, 2, "VALID")],
                                      [(192, 1, 1, "SAME"), (192, (1, 7), 1, "SAME"),
                                       (192, (7, 1), 1, "SAME"), (192, 3, 2, "VALID")],
                                      [("pool", "max", 3, 2, "VALID")]])
            x = mixed_7(x, "Mixed_7b")
            x = mixed_7(x, "Mixed_7c")
            with v1.variable_scope("Logits"):
                x = tf.reduce_mean(x, [1, 2], keepdims=True, name="GlobalPool")
                loss += _xent(pooled_logits(x, num_classes, "Conv2d_1c_1x1"), labels)
        return b.finish(loss, lambda step: v1.train.RMSPropOptimizer(
            learning_rate, decay=0.9, momentum=0.9, epsilon=1.0))


# ------------------------------------------------------------------------ GNMT
def gnmt(batch_size: int = 128, seq_length: int = 40, hidden: int = 512, vocab_size: int = 30000,
         num_layers: int = 4, learning_rate: float = 1.0) -> TFModel:
    """GNMT (Wu et al. 2016) as in TensorFlow's NMT tutorial (``gnmt`` attention architecture),
    unrolled over ``seq_length`` steps and trained with SGD. Encoder: a bidirectional first
    layer and ``num_layers - 1`` unidirectional layers, residual from the third layer on.
    Decoder: ``num_layers`` layers; the bottom layer's output queries Bahdanau attention over
    the encoder outputs and the context feeds every layer (the bottom one at the next step);
    residual from the third layer on. Paper sizes: Baechi 4 layers, hidden 512, vocabulary
    30,000, length 40/50, batch 128/256; Hierarchical Planner 2/4/8 layers, batch 64; Mars
    hidden 256, batch 128-256; Celeritas (NMT) 4 layers, hidden 2048, batch 512."""
    _need(num_layers >= 2, "gnmt", f"num_layers must be >= 2, got {num_layers}")
    last = num_layers - 1
    with ModelBuilder("gnmt", batch_size) as b:
        shape = (batch_size, seq_length)
        src = b.placeholder("source", shape, "int32", high=vocab_size)
        tgt_in = b.placeholder("target_input", shape, "int32", high=vocab_size)
        tgt_out = b.placeholder("target_output", shape, "int32", high=vocab_size)

        with b.layer(0), v1.variable_scope("embeddings"):
            enc_emb = v1.get_variable("encoder", [vocab_size, hidden])
            dec_emb = v1.get_variable("decoder", [vocab_size, hidden])
            src_steps = tf.unstack(tf.nn.embedding_lookup(enc_emb, src), axis=1)
            tgt_steps = tf.unstack(tf.nn.embedding_lookup(dec_emb, tgt_in), axis=1)

        with v1.variable_scope("encoder"):
            memory = _gnmt_encoder(b, src_steps, hidden, num_layers, batch_size)

        with v1.variable_scope("decoder"):
            with b.layer(last):
                attention = BahdanauAttention("attention", memory, hidden, hidden)
            cells, states = [], []
            for k in range(num_layers):
                with b.layer(k):
                    cells.append(LSTM(f"layer_{k}", 2 * hidden, hidden))
                    states.append(cells[k].zero_state(batch_size))
            with b.layer(last):
                proj = v1.get_variable("output_projection", [hidden, vocab_size])
                context = zeros_matrix(batch_size, hidden)
            losses = []
            for t, x in enumerate(tgt_steps):
                with v1.name_scope(f"step_{t}"):
                    y, context = _gnmt_decoder_step(b, cells, states, attention, x, context)
                    with b.layer(last):
                        losses.append(tf.nn.sparse_softmax_cross_entropy_with_logits(
                            labels=tgt_out[:, t], logits=tf.matmul(y, proj)))
            with b.layer(last):
                loss = tf.reduce_sum(tf.add_n(losses)) / batch_size
        return b.finish(loss, lambda step: v1.train.GradientDescentOptimizer(learning_rate))


def _gnmt_encoder(b: ModelBuilder, steps: list[tf.Tensor], hidden: int, num_layers: int, batch: int) -> tf.Tensor:
    """GNMT's encoder over the embedded source ``steps``: a bidirectional first layer, then
    unidirectional layers, residual from the third on; its outputs stacked (the attention memory)."""
    with b.layer(0):
        fw, bw = LSTM("bi_fw", hidden, hidden), LSTM("bi_bw", hidden, hidden)
        fw_out, bw_out = _run_lstm(fw, steps, batch), _run_lstm(bw, steps[::-1], batch)[::-1]
        outputs = [tf.concat([f, r], 1) for f, r in zip(fw_out, bw_out)]
    for k in range(1, num_layers):
        with b.layer(k):
            new = _run_lstm(LSTM(f"layer_{k}", outputs[0].shape[-1], hidden), outputs, batch)
            outputs = [n + o for n, o in zip(new, outputs)] if k >= 2 else new
    with b.layer(num_layers - 1):
        return tf.stack(outputs, axis=1)


def _gnmt_decoder_step(b: ModelBuilder, cells: list[LSTM], states: list, attention: BahdanauAttention,
                       x: tf.Tensor, context: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """One GNMT decoder step (``states`` updated in place): the bottom layer reads the input and
    the last context and queries the attention; the layers above read the context too, residual
    from the third. Returns the top layer's output and the new context."""
    with b.layer(0):
        states[0] = cells[0](tf.concat([x, context], 1), states[0])
    with b.layer(len(cells) - 1):
        context = attention(states[0][0])
    y = states[0][0]
    for k in range(1, len(cells)):
        with b.layer(k):
            states[k] = cells[k](tf.concat([y, context], 1), states[k])
            y = states[k][0] + y if k >= 2 else states[k][0]
    return y, context


def _run_lstm(cell: LSTM, inputs: list[tf.Tensor], batch: int) -> list[tf.Tensor]:
    state = cell.zero_state(batch)
    outputs = []
    for t, x in enumerate(inputs):
        with v1.name_scope(f"{cell.name}_step_{t}"):
            state = cell(x, state)
        outputs.append(state[0])
    return outputs


# ------------------------------------------------------------------------ Transformer
def transformer(batch_size: int = 256, seq_length: int = 64, hidden: int = 1024, heads: int = 16,
                filter_size: int = 2048, vocab_size: int = 32000, encoder_layers: int = 6,
                decoder_layers: int = 6, learning_rate: float = 1e-4) -> TFModel:
    """Transformer encoder-decoder (Vaswani et al. 2017; post-layer-norm), trained with Adam
    (beta2 0.98, epsilon 1e-9). Celeritas: 12 layers (here 6 + 6), 16 heads, 2,048 hidden
    units (here the feed-forward width, with model width 1,024), batch 256; the sequence length
    and vocabulary are not given there. Learned position embeddings; no dropout."""
    _need(hidden % heads == 0, "transformer", f"hidden ({hidden}) must be a multiple of heads ({heads})")
    rows = batch_size * seq_length
    last = max(encoder_layers, decoder_layers) - 1
    with ModelBuilder("transformer", batch_size) as b:
        shape = (batch_size, seq_length)
        src = b.placeholder("source", shape, "int32", high=vocab_size)
        tgt_in = b.placeholder("target_input", shape, "int32", high=vocab_size)
        tgt_out = b.placeholder("target_output", shape, "int32", high=vocab_size)
        with b.layer(0), v1.variable_scope("embeddings"):
            table = v1.get_variable("shared", [vocab_size, hidden])
            position = v1.get_variable("position", [seq_length, hidden])

            def embed(ids):
                return tf.reshape(tf.nn.embedding_lookup(table, ids) + position, [rows, hidden])

            x, y = embed(src), embed(tgt_in)
        for k in range(encoder_layers):
            with b.layer(k), v1.variable_scope(f"encoder/layer_{k}"):
                x = layer_norm(x + multi_head_attention(x, x, batch_size, heads, "self_attention"), "ln_1")
                x = layer_norm(x + _feed_forward(x, filter_size), "ln_2")
        causal = causal_bias(seq_length)
        for k in range(decoder_layers):
            with b.layer(k), v1.variable_scope(f"decoder/layer_{k}"):
                y = layer_norm(y + multi_head_attention(y, y, batch_size, heads, "self_attention",
                                                        causal), "ln_1")
                y = layer_norm(y + multi_head_attention(y, x, batch_size, heads, "cross_attention"), "ln_2")
                y = layer_norm(y + _feed_forward(y, filter_size), "ln_3")
        with b.layer(last), v1.variable_scope("output"):
            logits = dense(y, vocab_size, "projection", use_bias=False)
            loss = _xent(logits, tf.reshape(tgt_out, [rows]))
        return b.finish(loss, lambda step: v1.train.AdamOptimizer(learning_rate, beta2=0.98, epsilon=1e-9))


def _feed_forward(x: tf.Tensor, filter_size: int) -> tf.Tensor:
    return dense(dense(x, filter_size, "ffn_1", tf.nn.relu), x.shape[-1], "ffn_2")


# ------------------------------------------------------------------------ BERT
def bert(batch_size: int = 24, seq_length: int = 384, hidden: int = 768, heads: int = 12,
         intermediate_size: int = 3072, vocab_size: int = 30522, num_layers: int = 12,
         learning_rate: float = 3e-5) -> TFModel:
    """BERT-base encoder (Devlin et al. 2019) with the SQuAD span head, trained with Adam: the
    Mars setting (BERT-Base, sequence length 384, batch 24). Word, segment and position
    embeddings, post-layer-norm layers with GELU; no dropout."""
    _need(hidden % heads == 0, "bert", f"hidden ({hidden}) must be a multiple of heads ({heads})")
    rows = batch_size * seq_length
    with ModelBuilder("bert", batch_size) as b:
        shape = (batch_size, seq_length)
        ids = b.placeholder("input_ids", shape, "int32", high=vocab_size)
        segments = b.placeholder("segment_ids", shape, "int32", high=2)
        starts = b.placeholder("start_positions", (batch_size,), "int32", high=seq_length)
        ends = b.placeholder("end_positions", (batch_size,), "int32", high=seq_length)
        with b.layer(0), v1.variable_scope("bert/embeddings"):
            words = v1.get_variable("word_embeddings", [vocab_size, hidden])
            types = v1.get_variable("token_type_embeddings", [2, hidden])
            position = v1.get_variable("position_embeddings", [seq_length, hidden])
            x = tf.nn.embedding_lookup(words, ids) + tf.nn.embedding_lookup(types, segments) + position
            x = layer_norm(tf.reshape(x, [rows, hidden]), "LayerNorm")
        for k in range(num_layers):
            with b.layer(k), v1.variable_scope(f"bert/encoder/layer_{k}"):
                x = layer_norm(x + multi_head_attention(x, x, batch_size, heads, "attention"), "ln_1")
                x = layer_norm(x + dense(dense(x, intermediate_size, "intermediate", gelu), hidden,
                                         "output"), "ln_2")
        with b.layer(num_layers - 1), v1.variable_scope("squad"):
            logits = tf.reshape(dense(x, 2, "span_logits"), [batch_size, seq_length, 2])
            start_logits, end_logits = tf.unstack(logits, axis=2)
            loss = (_xent(start_logits, starts) + _xent(end_logits, ends)) / 2.0
        return b.finish(loss, lambda step: v1.train.AdamOptimizer(learning_rate, epsilon=1e-6))


# ------------------------------------------------------------------------ Tensor Holography
def tensor_holography(batch_size: int = 32, image_size: int = 384, filters: int = 24,
                      num_layers: int = 30, learning_rate: float = 1e-4) -> TFModel:
    """The Tensor Holography CNN (Shi et al. 2021) as Celeritas uses it: ``num_layers`` 3x3
    convolutions of ``filters`` channels at full resolution (batch norm, ReLU) from an RGB-D
    image (4 channels) to amplitude and phase of three colours (6 channels), trained with Adam on
    the squared error. Celeritas: 30 layers, 24 filters, batch 32 (image 384 as in the paper's
    data set)."""
    _need(num_layers >= 2, "tensor_holography", f"num_layers must be >= 2, got {num_layers}")
    with ModelBuilder("tensor_holography", batch_size) as b:
        rgbd = b.placeholder("rgbd", (batch_size, image_size, image_size, 4))
        target = b.placeholder("hologram", (batch_size, image_size, image_size, 6))
        x = rgbd
        for k in range(num_layers - 1):
            x = conv_bn_relu(x, filters, 3, f"conv_{k}")
        x = conv_bn_relu(x, 6, 3, f"conv_{num_layers - 1}", relu=False)
        loss = tf.reduce_mean(tf.square(x - target))
        return b.finish(loss, lambda step: v1.train.AdamOptimizer(learning_rate))


MODELS = {f.__name__: f for f in (linear_regression, inception_v3, gnmt, transformer, bert,
                                  tensor_holography)}
