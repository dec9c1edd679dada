"""The backend seam: all of the library's backend-specific code, in one place.

`keras_selfattn.attention` and the layers are written with `keras.ops`;
where a backend needs something of its own, they call one of these
functions:

- `fused_attention` (and `fused_keeps_float32`, `fused_takes_grouped_heads`):
  the backend's fused attention kernel
  (`keras.ops.dot_product_attention`, which JAX and PyTorch back with cuDNN,
  flash or memory-efficient kernels; TensorFlow has none).
- `xla_fused`: XLA fusion of the chunked path's per-block elementwise math
  (TensorFlow).
- `scan_blocks`: the chunked path's sequential loop over key blocks
  (`tf.while_loop`, `jax.lax.scan`, a Python loop).
- `may_need_gradient`: whether the chunked path needs its custom gradient
  (JAX differentiates only traced values; PyTorch records nothing under
  `torch.no_grad` and cannot trace one for ONNX).
- `values_known`: whether a tensor's values can be read now (eagerly), for
  the checks of values that only an eager call can make
  (`TokenAndPositionEmbedding`'s token ids); `invalid_id`: what a lookup
  gets in place of an id outside its table, where they cannot be checked.
- `comparable_dim`: a dimension as the choice of path may compare it (JAX's
  symbolic dimensions, in `jax.export`, count as unknown).
- `free_memory`: the free memory of the device the backend computes on (the
  default memory budget of the choice of path follows it).
- `positions`: the int32 positions 0, 1, ... of a sequence of any length
  (JAX's ONNX export needs `lax.iota` for an unknown one); `leading_rows`:
  the first rows of a table for such a length.
- `update_cache`: a decoding step's keys or values written into a cache
  (in a TensorFlow graph a scatter, which ONNX and LiteRT export, where
  `keras.ops.slice_update`'s `XlaDynamicUpdateSlice` has no ONNX operator;
  on PyTorch an index tensor as int64, for `torch.onnx`'s `ScatterND`).
- `layer_norm`: a `keras.layers.LayerNormalization`'s output (on PyTorch
  with the normalized shape as Python integers, which `torch.onnx` exports).

Nothing else in the package looks at `keras.backend.backend()` to compute
attention.
"""

from __future__ import annotations

import functools
import numbers
import os

import keras
from keras import ops

# The backends whose `keras.ops.dot_product_attention` is a fused kernel.
FUSED_BACKENDS = ("jax", "torch")


def has_fused_kernel() -> bool:
    """Whether the current backend has a fused attention kernel."""
    return keras.backend.backend() in FUSED_BACKENDS


def fused_keeps_float32(query) -> bool:
    """Whether the fused kernel keeps the logits and softmax of `query`'s
    attention in float32, as the package promises.

    Always for float32 inputs. For float16 and bfloat16 only on an
    accelerator, whose fused kernels accumulate in float32: on a CPU,
    Keras's fallback computes in the input dtype, where a float16 logit
    overflows past 65504 and its mask bias (-0.7 x 65504) can lose to a
    large logit.
    """
    if keras.backend.standardize_dtype(query.dtype) == "float32":
        return True
    if keras.backend.backend() == "jax":
        import jax

        return jax.default_backend() != "cpu"
    if keras.backend.backend() == "torch":
        return query.device.type != "cpu"
    return False


def fused_takes_grouped_heads() -> bool:
    """Whether the fused kernel takes `key` and `value` with fewer heads than
    `query` (grouped-query attention) without repeating them.

    JAX's `jax.nn.dot_product_attention` (XLA and cuDNN) contracts grouped
    heads as they are. Keras's PyTorch backend repeats them itself (and
    leaves a single kv head to broadcasting), and older JAX releases,
    without `jax.nn.dot_product_attention`, fall back to code that needs
    equal heads: there the heads are repeated here.
    """
    if keras.backend.backend() != "jax":
        return False
    import jax

    return hasattr(jax.nn, "dot_product_attention")


def _torch_cpu_or_compiling(tensor) -> bool:
    """Whether `tensor` is a PyTorch one on a CPU, or torch.compile traces."""
    if keras.backend.backend() != "torch":
        return False
    import torch

    compiling = getattr(torch.compiler, "is_compiling", lambda: False)
    return tensor.device.type == "cpu" or compiling()


def fused_attention(query, key, value, mask, scale, flash_attention):
    """The backend's fused kernel on 4-D (batch, seq, heads, dim) inputs.

    `key` and `value` may have fewer heads than `query`, a divisor of its
    (query head `h` uses kv head `h // groups`); they are repeated to the
    query's heads only where the kernel cannot take them grouped
    (`fused_takes_grouped_heads`). Returns the output in the dtype of
    `value`. Rows with no allowed key come back as the kernel makes them (a
    uniform average): the caller zeroes them. Where `flash_attention=True`
    and the backend refuses it here (JAX without cuDNN, PyTorch on a CPU:
    a `RuntimeError` from deep in the backend), a `ValueError` says so.
    """
    groups = query.shape[2] // key.shape[2]
    if groups > 1 and not fused_takes_grouped_heads():
        key = ops.repeat(key, groups, axis=2)
        value = ops.repeat(value, groups, axis=2)
    if flash_attention is None and _torch_cpu_or_compiling(query):
        # Keras's PyTorch op, left to choose, asks `torch.backends.cuda`
        # whether its flash kernel may run, through an `SDPAParams`: a C++
        # object that torch.compile cannot trace, so a compiled model broke
        # its graph at every attention call (6 breaks in a one-layer train
        # step on a CPU, 2026-12-07). With `False` it asks nothing and calls
        # PyTorch's `scaled_dot_product_attention` with no kernel imposed:
        # on a CPU the kernel it ran anyway; under torch.compile on a GPU
        # PyTorch's own choice (flash, or cuDNN first on recent GPUs).
        # Eagerly on a GPU Keras still asks, and may insist on flash.
        flash_attention = False
    try:
        output = ops.dot_product_attention(
            query,
            key,
            ops.cast(value, query.dtype),
            mask=mask,
            scale=scale,
            flash_attention=flash_attention,
        )
    except RuntimeError as error:
        if not flash_attention:
            raise
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ValueError(
            "`flash_attention=True` cannot be honoured: the backend's fused "
            f"kernel refused it here ({reason}). Set `flash_attention=None` "
            "to let the kernel choose. Received: "
            f"backend={keras.backend.backend()!r}, flash_attention=True"
        ) from error
    return ops.cast(output, value.dtype)


# JAX runs the block loop as a Python loop (rather than lax.scan) when the
# whole (batch, heads, q_len, k_len) matrix would have at most this many
# elements: then compiling is faster, and memory is no concern even if XLA
# schedules the unrolled blocks side by side.
_UNROLL_MAX_ELEMENTS = 1 << 22

_FUSED_CACHE = {}


def xla_fused(fn):
    """Returns `fn`, compiled where that fuses its elementwise ops.

    On TensorFlow each op of a block's softmax math (where, max, subtract,
    exp, sum) would be its own pass over the (batch, heads, q_len, chunk)
    block; compiled with XLA the chain runs as one or two loops, which makes
    the chunked path about 10% faster on CPU. JAX fuses by itself under
    `jit`; PyTorch runs `fn` as it is.

    In a graph (a `tf.function`, which is how Keras trains, predicts and
    exports) the ops are built in place, inside a
    `tf.xla.experimental.jit_scope`: they carry an attribute that asks
    TensorFlow to compile them as one XLA cluster, and stay ordinary ops
    that every exporter reads. A nested `tf.function(jit_compile=True)`
    would fuse the same way but stays a function call in the graph, which
    tf2onnx (behind `model.export(format="onnx")`) cannot convert: its
    ONNX file fails to load (`INVALID_GRAPH`, "No Op registered for
    PartitionedCall"). Eagerly, where no graph exists to annotate, `fn`
    runs as such a compiled `tf.function`.
    """
    if keras.backend.backend() != "tensorflow":
        return fn
    if fn not in _FUSED_CACHE:
        import tensorflow as tf

        compiled = tf.function(fn, jit_compile=True, reduce_retracing=True)

        @functools.wraps(fn)
        def fused(*args):
            if tf.executing_eagerly():
                return compiled(*args)
            with tf.xla.experimental.jit_scope(separate_compiled_gradients=False):
                return fn(*args)

        _FUSED_CACHE[fn] = fused
    return _FUSED_CACHE[fn]


def may_need_gradient(*tensors) -> bool:
    """Whether the chunked path wraps its loop in its custom gradient.

    JAX differentiates by tracing, so concrete (eager) arrays never need one;
    skipping the custom-gradient wrapper there spares a compilation per call.
    PyTorch needs none where autograd records nothing (`torch.no_grad`, as
    Keras's `predict` runs), and cannot have one while `torch.jit.trace`
    records the model (as `model.export(format="onnx")` does with an unknown
    batch size: the tracer cannot record an `autograd.Function`). There the
    loop runs as plain operations, which the tracer records; with gradients
    on, autograd records them too, so a traced module trained later keeps
    every block's weights for its backward pass (quadratic memory, as the
    plain path). TensorFlow always gets the wrapper.
    """
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        return torch.is_grad_enabled() and not torch.jit.is_tracing()
    if backend != "jax":
        return True
    import jax

    return any(isinstance(t, jax.core.Tracer) for t in tensors)


def comparable_dim(dim):
    """`dim` where Python can compare it with a number, else None.

    JAX's symbolic dimensions (the `batch` of a model that `jax.export` or
    jax2tf traces, as `model.export` does on JAX) answer `b <= 10**9` with an
    error, not a bool: they count as unknown, like `None`. PyTorch's `SymInt`
    (in `torch.export`) compares, under a guard, and stays.
    """
    if dim is None or isinstance(dim, numbers.Integral):
        return dim if dim is None else int(dim)
    if keras.backend.backend() == "jax":
        from jax import export

        if export.is_symbolic_dim(dim):
            return None
    return dim


def positions(length):
    """The int32 positions `0, 1, ..., length - 1`: `(length,)`.

    `keras.ops.arange(0, length)`, except on JAX, where it is `lax.iota`:
    jax2onnx (Keras's ONNX export on JAX) gives `jnp.arange` of an unknown
    length a dimension of its own, which no later index or broadcast
    accepts (`'_DynamicDimSentinel' object has no attribute 'rmax'`, jax2onnx
    0.17.1), and exports `lax.iota` of the same length.
    """
    if keras.backend.backend() == "jax":
        import jax.numpy as jnp
        from jax import lax

        return lax.iota(jnp.int32, length)
    return ops.arange(0, length, dtype="int32")


def leading_rows(table, length):
    """The first `length` rows of a 2-D `table`: `(length, table.shape[1])`.

    A slice, except for a symbolic `length` on JAX (`model.export` of an
    unknown sequence length), where `lax.dynamic_slice` must prove
    `length <= table.shape[0]` and cannot ("Symbolic dimension comparison
    ... is inconclusive"): there it is a gather of `positions(length)`
    (beyond the table, JAX's gather fills NaN).
    """
    if comparable_dim(length) is None and keras.backend.backend() == "jax":
        return ops.take(table, positions(length), axis=0)
    return ops.slice(table, (0, 0), (length, table.shape[1]))


def update_cache(cache, update, index):
    """`cache` with `update` written at `index` along axis 1.

    `cache` is `(batch, S, ...)`, `update` `(batch, L, ...)` with the same
    trailing dimensions, `index` an integer or a scalar integer tensor with
    `index + L <= S` (checked by the caller where known). It is
    `keras.ops.slice_update`, but for two exports:

    - TensorFlow, in a graph (a `tf.function`, as Keras's exporters trace
      one): `slice_update` is `XlaDynamicUpdateSlice`, which tf2onnx cannot
      convert (onnxruntime refused the file: "No Op registered for
      XlaDynamicUpdateSlice"). There it is `keras.ops.scatter_update` of the
      `batch * L` rows `(b, index + l)`, which SavedModel, ONNX (`ScatterND`)
      and LiteRT export. Eagerly it stays a slice update: there the scatter
      took 1.01 to 1.13x its time, in a `tf.function` 0.97 to 1.08x and
      under XLA 0.80 to 0.92x (a decoding step with a 1,024-position
      cache; `python benchmarks/cache_update.py`, three runs on a 2-core
      AMD EPYC, 2026-12-07, load about 2.7 from other work).
    - PyTorch, with an index tensor: the index as int64. Keras's
      `slice_update` concatenates the starts, and an int32 index made
      `torch.onnx` write int32 indices for `ScatterND`, which onnxruntime
      refuses. A Python int keeps Keras's fast path (slices).
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if not tf.executing_eagerly():
            batch, length = ops.shape(update)[0], ops.shape(update)[1]
            rows = ops.repeat(positions(batch), length)
            columns = ops.add(
                ops.tile(positions(length), [batch]), ops.cast(index, "int32")
            )
            indices = ops.stack([rows, columns], axis=-1)
            rows_of_update = ops.reshape(update, (-1, *update.shape[2:]))
            return ops.scatter_update(cache, indices, rows_of_update)
    if backend == "torch" and not isinstance(index, numbers.Integral):
        index = ops.cast(index, "int64")
    start = [0, index] + [0] * (len(cache.shape) - 2)
    return ops.slice_update(cache, start, update)


def layer_norm(norm: keras.layers.LayerNormalization, inputs):
    """`norm(inputs)`: the output of a built `keras.layers.LayerNormalization`.

    It is the layer's own `call`, but on PyTorch over the last axis (the
    Transformer blocks' normalization), where Keras hands `F.layer_norm` a
    normalized shape read from `inputs.shape`: `torch.onnx` traces those
    sizes as tensors and refuses them ("Failed to export a node ...
    onnx::Gather ... because it is not constant"), so no model holding a
    `LayerNormalization` exported to ONNX from PyTorch. Here the shape is
    the weights' own, Python integers; the math is Keras's (in at least
    float32, cast back to the layer's compute dtype).
    """
    axis = norm.axis if isinstance(norm.axis, (list, tuple)) else [norm.axis]
    last = list(axis) in ([-1], [len(inputs.shape) - 1])
    weights = norm.gamma if norm.gamma is not None else norm.beta
    rms_scaling = getattr(norm, "rms_scaling", False)
    if keras.backend.backend() != "torch" or not last or weights is None or rms_scaling:
        return keras.layers.LayerNormalization.call(norm, inputs)
    import torch.nn.functional as F

    dtype = keras.backend.result_type(inputs.dtype, "float32")

    def as_tensor(weight):
        return None if weight is None else ops.convert_to_tensor(weight, dtype)

    outputs = F.layer_norm(
        ops.convert_to_tensor(inputs, dtype),
        tuple(int(size) for size in weights.shape),
        as_tensor(norm.gamma),
        as_tensor(norm.beta),
        norm.epsilon,
    )
    return ops.cast(outputs, norm.compute_dtype)


def values_known(x) -> bool:
    """Whether the values of tensor `x` can be read now.

    True for an eager tensor; False inside a traced or compiled function (a
    `tf.function`, JAX's `jit` and `grad`, `torch.compile`), for Keras's
    symbolic tensors and for PyTorch's shape-only `meta` tensors, where a
    check of values can raise nothing and reading them would fail.
    """
    if isinstance(x, keras.KerasTensor):
        return False
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.executing_eagerly() and not tf.is_symbolic_tensor(x)
    if backend == "jax":
        import jax

        return not isinstance(x, jax.core.Tracer)
    if backend == "torch":
        import torch

        if isinstance(x, torch.Tensor) and x.device.type == "meta":
            return False
        return not torch.compiler.is_compiling()
    return False


def invalid_id(size: int) -> int:
    """The id an embedding lookup of `size` rows gets, in a compiled
    function, in place of one outside `[0, size)`.

    `size` itself on TensorFlow, whose CPU gather kernel then raises
    (`InvalidArgumentError: indices[...] = size is not in [0, size)`), as
    it did for a large id before the layers checked them, and now for a
    negative one too; 0 elsewhere (PyTorch's CUDA kernel would stop the
    process with a device-side assert). The layers output NaN at such a
    position either way, which is what remains where the lookup does not
    raise (XLA clamps the id; TensorFlow's GPU kernel returns zeros).
    """
    return size if keras.backend.backend() == "tensorflow" else 0


def scan_blocks(step, carry, xs, ys_specs, work=None):
    """Runs `carry, ys = step(carry, x)` over the leading axis of `xs`, in order.

    A sequential loop whose
    per-iteration outputs are stacked, without keeping any other
    per-iteration tensor alive (so the loop does not bring quadratic memory
    back). TensorFlow gets a `tf.while_loop` with `parallel_iterations=1`
    (one block in flight) and `TensorArray`s, which also works in graph mode
    and under XLA (`jit_compile=True`); JAX gets `jax.lax.scan` (or, with
    a Python loop when `work` is at most `_UNROLL_MAX_ELEMENTS`: no scan to
    compile for small problems);
    PyTorch, which runs eagerly, a Python loop.

    Args:
        step: Function `(carry, x) -> (carry, ys)`; `carry` and `ys` are
            tuples of tensors, `x` is the tuple of the `xs` at one index.
        carry: Tuple of tensors, the initial carry.
        xs: Tuple of tensors sharing a static leading (block) axis.
        ys_specs: Tuple of `(shape, dtype)`, one per tensor in `ys`; shapes
            without the block axis, `None` for an unknown dimension. (A
            single block is `step` called once: no loop, no specs used.)
        work: Optional integer, the number of elements of the whole
            (batch, heads, q_len, k_len) problem; JAX unrolls the loop when
            it is small. Defaults to `None` (never unroll).

    Returns:
        The tuple `(carry, ys)`, each `ys` stacked on a new leading axis.
    """
    backend = keras.backend.backend()
    num_blocks = xs[0].shape[0]
    if num_blocks == 1:  # One block (of any size): no loop to build.
        carry, ys = step(carry, tuple(x[0] for x in xs))
        return carry, tuple(ops.expand_dims(y, 0) for y in ys)
    if backend == "tensorflow":
        import tensorflow as tf

        if num_blocks is None:  # an unknown sequence length: a tensor
            num_blocks = tf.shape(xs[0])[0]
        arrays = tuple(
            tf.TensorArray(dtype, size=num_blocks, element_shape=shape)
            for shape, dtype in ys_specs
        )

        def body(i, carry, arrays):
            carry, ys = step(carry, tuple(x[i] for x in xs))
            arrays = tuple(a.write(i, y) for a, y in zip(arrays, ys, strict=True))
            return i + 1, carry, arrays

        _, carry, arrays = tf.while_loop(
            lambda i, *_: i < num_blocks,
            body,
            (tf.constant(0), tuple(carry), arrays),
            parallel_iterations=1,
        )
        return carry, tuple(a.stack() for a in arrays)
    unroll = work is not None and work <= _UNROLL_MAX_ELEMENTS
    if backend == "jax" and not unroll:
        import jax

        return jax.lax.scan(step, tuple(carry), tuple(xs))
    outputs = []
    for i in range(int(num_blocks)):
        carry, ys = step(carry, tuple(x[i] for x in xs))
        outputs.append(ys)
    ys = tuple(ops.stack(list(y), axis=0) for y in zip(*outputs, strict=True))
    return carry, ys


def _host_available() -> int:
    """The host's available memory in bytes (MemAvailable of /proc/meminfo,
    else the free physical pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 << 30  # No way to ask (not Linux nor POSIX): assume 8 GiB.


def _accelerator_free() -> int | None:
    """The free memory of the backend's first accelerator in bytes, or None
    where the backend computes on the CPU (or cannot say)."""
    backend = keras.backend.backend()
    try:
        if backend == "jax":
            import jax

            device = jax.devices()[0]
            if device.platform == "cpu":
                return None
            stats = device.memory_stats() or {}
            if "bytes_limit" in stats:
                return stats["bytes_limit"] - stats.get("bytes_in_use", 0)
        elif backend == "torch":
            import torch

            if torch.cuda.is_available():
                return torch.cuda.mem_get_info()[0]
        elif backend == "tensorflow":
            import tensorflow as tf

            if tf.config.list_logical_devices("GPU"):
                from tensorflow.python.client import device_lib

                gpu = next(
                    d for d in device_lib.list_local_devices() if d.device_type == "GPU"
                )
                used = tf.config.experimental.get_memory_info("GPU:0")["current"]
                return gpu.memory_limit - used
    except Exception:  # A device that cannot say: the host's figure.
        return None
    return None


def free_memory() -> tuple[str, int]:
    """The free memory of the device that the backend computes on.

    The accelerator's (JAX's `memory_stats`, `torch.cuda.mem_get_info`,
    TensorFlow's allocator limit less its use) where the backend uses one,
    else the host's available memory (`MemAvailable` in /proc/meminfo).

    Returns:
        The pair `(device, bytes)`, `device` being `"accelerator"` or
        `"host"`.
    """
    free = _accelerator_free()
    if free is not None:
        return "accelerator", int(free)
    return "host", _host_available()
