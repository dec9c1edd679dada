"""Where the demo's training step spends its time, part by part.

Builds the default IMDB model (vocabularies adapted on the training reviews),
draws real training batches (`ReviewBatches`: reviews of similar length,
batch 32) and times each part of a training step on the same batches, under
`tf.function`, alternating the parts so that load hits all alike:

- data pipeline: making a batch of strings (`ReviewBatches[i]`);
- TextVectorization (+ clipping) of the words, and of the bigrams;
- token + position embedding, bigram embedding: forward and backward;
- the encoder block, and within it the attention layer alone: forward and
  backward (with the padding mask);
- pooling, classifier and loss: forward and backward;
- the optimizer: AdamW's update of every weight (given gradients);
- the whole `model.train_on_batch`, for comparison with the sum.

    python benchmarks/profile_demo.py                     # ours
    python benchmarks/profile_demo.py --attention keras   # the Keras arm

Timing thresholds never go into tests; this script is where time is measured.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", default="keras_selfattn")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    from keras_selfattn.imdb import data
    from keras_selfattn.imdb import model as m
    from keras_selfattn.imdb.train import describe_device

    dataset = data.load_bundled()
    texts, labels = dataset.train_texts, dataset.train_labels
    model = m.build_model(texts, attention=args.attention)
    m.compile_model(model, 1000)
    batches = m.ReviewBatches(texts, labels, 32, seed=0)
    chosen = list(range(args.batches))
    get = model.get_layer
    encoder = get(f"{m.ENCODER}_0")
    parts_of_batch = {}

    def prepare(i):
        x, y = batches[i]
        ids = get(m.CLIP)(get(m.TEXT_VECTORIZATION)(x))
        bigram_ids = get(m.BIGRAM_CLIP)(get(m.BIGRAM_VECTORIZATION)(x))
        token_vectors = get(m.EMBEDDING)(ids)
        mask = get(m.EMBEDDING).compute_mask(ids)
        h = get(m.BIGRAM_EMBEDDING)(token_vectors, bigram_ids, mask=mask)
        encoded = encoder(h, mask=mask)
        streams = [get(m.TEXT_VECTORIZATION)(x), get(m.BIGRAM_VECTORIZATION)(x)]
        return x, y, ids, bigram_ids, token_vectors, mask, h, encoded, streams

    for i in chosen:
        parts_of_batch[i] = prepare(i)

    def backward(fn, layers):
        weights = [w for layer in layers for w in layer.trainable_weights]

        @tf.function(reduce_retracing=True)
        def step(*inputs):
            with tf.GradientTape() as tape:
                out = fn(*inputs)
                loss = tf.reduce_sum(tf.square(tf.cast(out, "float32")))
            return tape.gradient(loss, weights)

        return step

    vectorize = tf.function(
        lambda x: get(m.CLIP)(get(m.TEXT_VECTORIZATION)(x)), reduce_retracing=True
    )
    vectorize_bigrams = tf.function(
        lambda x: get(m.BIGRAM_CLIP)(get(m.BIGRAM_VECTORIZATION)(x)),
        reduce_retracing=True,
    )
    embed = backward(lambda ids: get(m.EMBEDDING)(ids), [get(m.EMBEDDING)])
    embed_bigrams = backward(
        lambda t, b, mask: get(m.BIGRAM_EMBEDDING)(t, b, mask=mask),
        [get(m.BIGRAM_EMBEDDING)],
    )
    encode = backward(lambda h, mask: encoder(h, mask=mask, training=True), [encoder])
    attend = backward(
        lambda h, mask: encoder.attention_layer(
            h, h, query_mask=mask, value_mask=mask, training=True
        ),
        [encoder.attention_layer],
    )
    ngram = any(layer.name == m.NGRAM for layer in model.layers)
    head_layers = [get(m.POOLING), get(m.CLASSIFIER)]
    head_layers += [get(m.NGRAM)] if ngram else []

    def head_loss(encoded, mask, y, streams):
        pooled = get(m.POOLING)(encoded, mask=mask)
        if ngram:  # the classifier reads the pooled vector and the n-gram score
            score = get(m.NGRAM)(streams)
            pooled = get(m.FEATURES)([tf.cast(pooled, "float32"), score])
        p = get(m.CLASSIFIER)(pooled)
        return keras.losses.binary_crossentropy(y[:, None], p)

    head = backward(head_loss, head_layers)
    optimizer = model.optimizer
    variables = model.trainable_weights
    optimizer.build(variables)
    zero_grads = [tf.zeros_like(v) for v in variables]
    pairs = list(zip(zero_grads, variables, strict=True))
    update = tf.function(lambda: optimizer.apply_gradients(pairs))

    parts = {
        "data pipeline (ReviewBatches[i])": lambda i: batches[i],
        "TextVectorization + clip (words)": lambda i: vectorize(parts_of_batch[i][0]),
        "TextVectorization + clip (bigrams)": lambda i: vectorize_bigrams(
            parts_of_batch[i][0]
        ),
        "token + position embedding (fwd+bwd)": lambda i: embed(parts_of_batch[i][2]),
        "bigram embedding (fwd+bwd)": lambda i: embed_bigrams(
            parts_of_batch[i][4], parts_of_batch[i][3], parts_of_batch[i][5]
        ),
        "encoder block (fwd+bwd)": lambda i: encode(
            parts_of_batch[i][6], parts_of_batch[i][5]
        ),
        "  of which attention layer (fwd+bwd)": lambda i: attend(
            parts_of_batch[i][6], parts_of_batch[i][5]
        ),
        "pooling + n-gram branch + classifier + loss (fwd+bwd)": lambda i: head(
            parts_of_batch[i][7],
            parts_of_batch[i][5],
            parts_of_batch[i][1],
            parts_of_batch[i][8],
        ),
        "optimizer (AdamW update)": lambda i: update(),
        "whole train_on_batch": lambda i: model.train_on_batch(
            parts_of_batch[i][0], parts_of_batch[i][1]
        ),
    }

    def run(fn, i):
        result = fn(i)
        for t in tf.nest.flatten(result):
            if hasattr(t, "numpy"):
                t.numpy()

    for fn in parts.values():  # trace every shape once
        for i in chosen:
            run(fn, i)
    seconds = {name: [] for name in parts}
    for _ in range(args.rounds):
        for name, fn in parts.items():
            start = time.perf_counter()
            for i in chosen:
                run(fn, i)
            seconds[name].append((time.perf_counter() - start) / len(chosen))

    lengths = [int(parts_of_batch[i][2].shape[1]) for i in chosen]
    print("command: " + shlex.join([sys.executable, *sys.argv]))
    print(f"device: {describe_device()[0]}")
    print(
        f"attention: {args.attention}; {len(chosen)} training batches of 32, "
        f"padded lengths {min(lengths)}-{max(lengths)} (median "
        f"{int(np.median(lengths))}); median of {args.rounds} rounds, ms per batch"
    )
    whole = statistics.median(seconds["whole train_on_batch"])
    print("| part | ms per batch | share of train_on_batch |\n|---|---|---|")
    for name, values in seconds.items():
        ms = 1e3 * statistics.median(values)
        print(f"| {name} | {ms:.1f} | {100 * ms / (1e3 * whole):.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
