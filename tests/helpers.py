"""Helpers shared by the test modules: arrays, gradients, data sets, PNGs, ports,
docstrings."""

from __future__ import annotations

import doctest
import importlib
import inspect
import re
import socket
import struct
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_selfattn.layers.multi_head_attention import _KERAS_ACCEPTS, _KERAS_SINCE

BACKEND = keras.backend.backend()


def release(version: str) -> tuple[int, int]:
    """`"3.15.1"` -> `(3, 15)`."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def needs_keras(version: str, why: str) -> pytest.MarkDecorator:
    """Skips a test on a Keras older than `version` (the floor lane's Keras)."""
    return pytest.mark.skipif(
        release(keras.__version__) < release(version),
        reason=f"needs Keras {version} or newer ({why}); this is {keras.__version__}",
    )


# The demo model that keras-selfattn 0.1 saved (commit fa5a0f5, Keras 3.15),
# with the probabilities it gave then (`imdb_demo_v0.1.json`).
DEMO_V0_1 = Path(__file__).parent / "data" / "imdb_demo_v0.1.keras"
needs_demo_v0_1 = needs_keras(
    "3.15", "the model was saved by Keras 3.15: GlorotUniform's input_axes"
)


def for_this_keras(arguments: Mapping[str, object]) -> dict[str, object]:
    """`MultiHeadAttention` arguments without those the installed Keras lacks.

    On a Keras older than `use_gate` or `sliding_window` (see `setup.cfg`'s
    floor), `MultiHeadAttention` refuses them; tests of everything else drop
    them there, and `tests/layers/test_multi_head_attention.py` tests the
    refusal.
    """
    return {
        name: value
        for name, value in arguments.items()
        if name not in _KERAS_SINCE or name in _KERAS_ACCEPTS
    }


def to_numpy(x) -> np.ndarray:
    """Any backend tensor (or array) as a NumPy array."""
    return keras.ops.convert_to_numpy(x)


def plain_attributes(layer) -> dict[str, object]:
    """A layer's attributes that are plain values (not layers or variables),
    without its name and paths: what `keras_selfattn.convert`'s tests compare
    between a converted layer and ours built from the same config."""
    kinds = (bool, int, float, str, type(None), tuple)
    skip = {"name", "_path", "_parent_path", "_call_signature"}
    return {
        k: v for k, v in vars(layer).items() if isinstance(v, kinds) and k not in skip
    }


def paired_with_keras(theirs, ours, q, v):
    """Keras's layer and ours (built here), ours with Keras's weights.

    Keras's is built with `return_attention_scores=True`: its explicit path,
    since its fused JAX path rejects `value_dim != key_dim`.
    """
    theirs(q, v, return_attention_scores=True)
    ours(q, v)
    ours.set_weights(theirs.get_weights())
    return theirs, ours


def assert_close(ours, theirs, where=None, atol: float = 1e-5) -> None:
    """`ours` equals `theirs` within `atol` (at `where`, an index, if given)."""
    ours, theirs = to_numpy(ours), to_numpy(theirs)
    if where is not None:
        ours, theirs = ours[where], theirs[where]
    np.testing.assert_allclose(ours, theirs, atol=atol, rtol=0)


def output_and_grads(
    fn: Callable, args: Sequence[np.ndarray], upstream: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray]]:
    """`fn(*args)` and the gradients of `sum(fn(*args) * upstream)` wrt `args`.

    Differentiates with the current backend's own machinery
    (`tf.GradientTape`, `jax.value_and_grad` under `jax.jit`, torch autograd).
    """
    if BACKEND == "tensorflow":
        import tensorflow as tf

        args = [tf.constant(a) for a in args]
        with tf.GradientTape() as tape:
            tape.watch(args)
            out = fn(*args)
            loss = tf.reduce_sum(out * upstream)
        return to_numpy(out), [to_numpy(g) for g in tape.gradient(loss, args)]
    if BACKEND == "jax":
        import jax
        import jax.numpy as jnp

        def loss(*a):
            out = fn(*a)
            return jnp.sum(out * upstream), out

        argnums = tuple(range(len(args)))
        run = jax.jit(jax.value_and_grad(loss, argnums, has_aux=True))
        (_, out), grads = run(*args)
        return to_numpy(out), [to_numpy(g) for g in grads]
    import torch

    args = [torch.tensor(a, requires_grad=True) for a in args]
    out = fn(*args)
    (out * torch.tensor(upstream)).sum().backward()
    return to_numpy(out.detach()), [to_numpy(a.grad) for a in args]


def gradients(fn: Callable, *arrays: np.ndarray) -> list[np.ndarray]:
    """The gradients of the scalar `fn(*arrays)` wrt `arrays`, as NumPy."""
    upstream = np.ones((), dtype=arrays[0].dtype)
    return output_and_grads(fn, arrays, upstream)[1]


def write_reviews(root: Path, split: str, reviews: Mapping[str, Sequence[str]]):
    """Writes `reviews` ({"pos": [...], "neg": [...]}) as aclImdb `.txt` files."""
    for label, texts in reviews.items():
        folder = root / split / label
        folder.mkdir(parents=True)
        for i, text in enumerate(texts):
            (folder / f"{i}_7.txt").write_text(text, encoding="utf-8")


def write_acl(root: Path, n_train: int, n_test: int) -> Path:
    """A tiny aclImdb folder of easy synthetic reviews, `n // 2` per class."""
    words = {"pos": ["great", "superb", "loved"], "neg": ["awful", "boring", "hated"]}
    for split, n in (("train", n_train), ("test", n_test)):
        write_reviews(
            root,
            split,
            {
                label: [
                    f"The film was {mood[i % 3]}, I {mood[(i + 1) % 3]} it."
                    for i in range(n // 2)
                ]
                for label, mood in words.items()
            },
        )
    return root


def png_size(path: Path) -> tuple[int, int]:
    """The (width, height) of a PNG file; fails if it is not one."""
    header = Path(path).read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def tensorboard_scalars(log_dir: Path) -> dict[str, dict[str, int]]:
    """The scalar tags TensorBoard event files hold, per run folder.

    Returns:
        `{run: {tag: number of values}}`, e.g. `{"train": {"epoch_loss": 2}}`.
    """
    import tensorflow as tf

    runs: dict[str, dict[str, int]] = {}
    for path in sorted(Path(log_dir).rglob("events.out.tfevents.*")):
        tags = runs.setdefault(path.parent.relative_to(log_dir).as_posix(), {})
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                tags[value.tag] = tags.get(value.tag, 0) + 1
    return runs


def free_ports(n: int = 1) -> list[int]:
    """`n` TCP ports that nothing listens on at 127.0.0.1 (at the time asked).

    Another process can take one before it is used: a child process that must
    be told its port up front is started again on fresh ports when it cannot
    bind; a server of ours binds port 0 and says which port it got.
    """
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_is_free(port: int) -> bool:
    """Whether `port` can be bound at 127.0.0.1 now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def assert_padding_ignored(attention: Callable, rng, **options) -> None:
    """NaN and inf at padded keys, values and queries change nothing real.

    `attention(q, k, v, padding_mask=..., **options)` is called on
    (3, 5, 2, 4) self-attention inputs, sequence 0 all padding, and again with
    NaN, inf and -inf at every padded position: the outputs at real queries,
    the gradients of every input at real positions (all finite) and the
    zero gradients at padded keys and values must not change.
    """
    q, k, v = (rng.normal(size=(3, 5, 2, 4)).astype("float32") for _ in "qkv")
    padding_mask = np.arange(5)[None, :] < np.array([0, 2, 5])[:, None]
    upstream = rng.normal(size=q.shape).astype("float32")
    # A padded query is the caller's to zero: its own row, and what flows back.
    upstream[~padding_mask] = 0.0

    def fn(q, k, v):
        out = attention(q, k, v, padding_mask=padding_mask, **options)
        return out[0] if isinstance(out, tuple) else out

    def poisoned(x):
        x = x.copy()
        x[~padding_mask] = rng.choice([np.nan, np.inf, -np.inf], x[~padding_mask].shape)
        return x

    want, want_grads = output_and_grads(fn, (q, k, v), upstream)
    # Padded keys and values: nothing changes, and everything stays finite.
    got, got_grads = output_and_grads(fn, (q, poisoned(k), poisoned(v)), upstream)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, atol=1e-6)
    for name, grad, reference in zip("qkv", got_grads, want_grads, strict=True):
        assert np.all(np.isfinite(grad)), f"d{name} is not finite"
        np.testing.assert_allclose(grad, reference, atol=1e-5)
    np.testing.assert_array_equal(got_grads[1][~padding_mask], 0.0)
    np.testing.assert_array_equal(got_grads[2][~padding_mask], 0.0)
    # Padded queries as well: the real queries' outputs do not change.
    got = to_numpy(fn(poisoned(q), poisoned(k), poisoned(v)))
    np.testing.assert_allclose(got[padding_mask], want[padding_mask], atol=1e-6)


def traced_shapes(fn: Callable, *args, dtype=None, variables=()) -> list[list[int]]:
    """The static shape of every tensor in the TensorFlow graph of `fn(*args)`
    and its gradient (with respect to the floating `args` and `variables`),
    nested function bodies (the block loop) included; only the tensors of
    `dtype` (a `tf.DType`) if given."""
    import tensorflow as tf

    @tf.function
    def run(*tensors):
        sources = [t for t in tensors if t.dtype.is_floating] + list(variables)
        with tf.GradientTape() as tape:
            tape.watch([t for t in tensors if t.dtype.is_floating])
            out = fn(*tensors)
        return tape.gradient(tf.reduce_sum(out), sources) if sources else out

    graph = run.get_concrete_function(*(tf.constant(a) for a in args)).graph
    shapes, graphs, seen = [], [graph], set()
    while graphs:
        g = graphs.pop()
        for op in g.get_operations():
            shapes += [
                t.shape.as_list()
                for t in op.outputs
                if t.shape.rank and (dtype is None or t.dtype == dtype)
            ]
        for function in getattr(g, "_functions", {}).values():
            if id(function.graph) not in seen:
                seen.add(id(function.graph))
                graphs.append(function.graph)
    return shapes


def query_by_key(shapes, q_len: int, k_lens) -> list[list[int]]:
    """The shapes with a query axis and a key axis (q_len may be a k_len)."""

    def has_both(shape):
        rest = list(shape)
        if q_len not in rest:
            return False
        rest.remove(q_len)
        return any(k in rest for k in k_lens)

    return [s for s in shapes if has_both(s)]


# The argument checks both Transformer blocks share (TransformerBlock's),
# each case named: `{id: (kwargs, the argument the error names)}`.
BLOCK_BAD_ARGUMENTS = {
    "intermediate_dim": ({"intermediate_dim": 0}, "intermediate_dim"),
    "num_heads": ({"num_heads": 0}, "num_heads"),
    "dropout_negative": ({"dropout": -0.1}, "dropout"),
    "dropout_one": ({"dropout": 1.0}, "dropout"),
    "attention_dropout_negative": ({"attention_dropout": -0.1}, "attention_dropout"),
    "attention_dropout_one": ({"attention_dropout": 1.0}, "attention_dropout"),
    "epsilon": ({"layer_norm_epsilon": 0}, "layer_norm_epsilon"),
    "normalize_first_string": ({"normalize_first": "no"}, "normalize_first"),
    "normalize_first_int": ({"normalize_first": 1}, "normalize_first"),
    # Checked when the block is made, not from its first call's offsets.
    "seed_float": ({"seed": 1.5}, "seed"),
    "seed_string": ({"seed": "1"}, "seed"),
    "seed_negative": ({"seed": -1}, "seed"),
}


def assert_quantized_model_round_trips(model, x, path: Path, mode: str) -> None:
    """`model.quantize(mode)` changes the outputs a little, and the saved
    model loads and gives the quantized outputs exactly (not the float ones:
    Keras's own MultiHeadAttention and keras-hub's blocks forget in their
    configs that their sub-layers were quantized, and fail to load).

    The models are called directly, each the same way: `predict` would trace
    a function for each of the four models, which took a third of the time
    and tests nothing about saving.
    """
    before = to_numpy(model(x))
    model.quantize(mode)
    quantized = to_numpy(model(x))
    assert 0 < np.abs(quantized - before).max() < 0.2
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(to_numpy(loaded(x)), quantized)
    # The loaded model saves and loads again.
    again = path.with_name(f"again-{path.name}")
    loaded.save(again)
    reloaded = keras.models.load_model(again)
    np.testing.assert_array_equal(to_numpy(reloaded(x)), quantized)


def model_around(block: keras.layers.Layer, kind: str, shape=(5, 8)) -> keras.Model:
    """A functional or a Sequential model of one block on `(batch, *shape)`
    inputs (in a Sequential model, a layer's path at load lacks the model's
    name)."""
    inputs = keras.Input(shape)
    if kind == "functional":
        return keras.Model(inputs, block(inputs))
    return keras.Sequential([inputs, block])


def docstring_examples(module_name: str) -> list[doctest.DocTest]:
    """The doctests of the `Example:` sections of a module's docstrings."""
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    return [test for test in finder.find(module) if test.examples]


def failed_examples(tests: Sequence[doctest.DocTest], globs: Mapping) -> str:
    """Runs doctests (with `...` as a wildcard) in `globs`; the report of the
    failures, empty when they all pass."""
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for test in tests:
        test.globs.update(globs, __name__="__doc__")
        runner.run(test, out=report.append)
    return "".join(report) if runner.summarize(verbose=False).failed else ""


def _args_section(doc: str) -> str:
    """The `Args:` section of a Keras-style docstring (`Attributes:`, of a
    dataclass)."""
    found = re.search(
        r"\n\s*(Args|Attributes):\n(.*?)(\n\s*\n\s*[A-Z][\w ]+:\n|\Z)", doc, re.S
    )
    assert found, "no Args: or Attributes: section"
    return found.group(2)


def arguments_not_in_args_section(obj: Callable) -> list[str]:
    """The arguments of a function (a class's constructor) that its
    docstring's `Args:` section does not name."""
    function = obj.__init__ if inspect.isclass(obj) else obj
    parameters = [
        name
        for name, p in inspect.signature(function).parameters.items()
        if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if not parameters:
        return []
    args = _args_section(inspect.getdoc(obj))
    return [
        name
        for name in parameters
        if not re.search(rf"^\s*{name}:|`{name}`", args, re.M)
    ]
