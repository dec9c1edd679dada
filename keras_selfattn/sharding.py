"""How the layers shard under `keras.distribution` (model parallelism).

`layout_map(device_mesh)` returns the `keras.distribution.LayoutMap` that
`keras.distribution.ModelParallel` takes. It splits every attention layer of
this package by heads over one axis of the device mesh, as keras-hub's
`get_layout_map` does for its models, and the feed-forward network of
`TransformerEncoder` Megatron-style (Shoeybi et al., 2019): the first kernel
by columns, the second by rows, so each device keeps its share of the hidden
units from one kernel to the next. On JAX, XLA then computes each device's
share and adds the partial results across devices where a product needs
them.
"""

from __future__ import annotations

import keras

from keras_selfattn._validation import invalid

__all__ = ["layout_map"]

# The weights of this package's layers, by the end of their paths
# (`variable.path`, e.g. "encoder/self_attention_layer/query/kernel"), and how each
# of their axes shards: "model" on the mesh's model axis, None replicated.
_SHARDS = {
    # MultiHeadAttention and GroupQueryAttention (and Keras's): projections to
    # (in, heads, head_dim), biases (heads, head_dim), and the output
    # projection from (heads, head_dim, out). GroupQueryAttention's key and
    # value projections have its key-value heads on that axis.
    "(query|key|value)/kernel": (None, "model", None),
    "(query|key|value)/bias": ("model", None),
    "attention_output/kernel": ("model", None, None),
    # SelfAttention: the fused projection (features, 3 * units) by columns,
    # the output projection (units, units) by rows, which are the heads.
    "qkv_kernel": (None, "model"),
    "qkv_bias": ("model",),
    "output_kernel": ("model", None),
    # AttentionPooling: keys (features, heads * key_dim), by heads.
    "key_kernel": (None, "model"),
    "key_bias": ("model",),
    # TransformerEncoder's (and TransformerDecoder's) feed-forward network,
    # under keras-hub's names.
    "feedforward_intermediate_dense/kernel": (None, "model"),
    "feedforward_intermediate_dense/bias": ("model",),
    "feedforward_output_dense/kernel": ("model", None),
}


def layout_map(
    device_mesh: keras.distribution.DeviceMesh, model_axis: str = "model"
) -> keras.distribution.LayoutMap:
    """Returns a `LayoutMap` that shards this package's layers by heads.

    Under `keras.distribution.ModelParallel` (JAX backend) with this map:

    - `MultiHeadAttention` splits its heads over the mesh's `model_axis`:
      the query, key and value kernels `(in, heads, head_dim)` and biases
      on their heads axis, the output kernel `(heads, head_dim, out)` on its
      heads axis.
    - `GroupQueryAttention` splits its query heads and its key-value heads
      the same way: both counts must divide by the size of `model_axis`.
      Where its key-value heads do not (multi-query attention has one),
      replicate that layer's key and value projections by their exact
      variable paths, which the map looks up before its patterns (a path
      starts with the names of the layers that hold the layer, as
      `"net/mqa/key/kernel"` for one inside a subclassed model `net`: read
      them from `[v.path for v in model.weights]`):

      ```python
      layouts = keras_selfattn.layout_map(mesh)
      for part in ("key", "value"):  # the layer named "mqa": replicated
          layouts[f"mqa/{part}/kernel"] = (None, None, None)
          layouts[f"mqa/{part}/bias"] = (None, None)
      ```

    - `SelfAttention` splits its fused `qkv_kernel` `(features, 3 * units)`
      by columns and its `output_kernel` `(units, units)` by rows, the
      concatenated heads. The fused columns are `[Q | K | V]`, so a shard of
      them is not whole heads: XLA moves the projected values between
      devices before the attention.
    - `AttentionPooling` splits its `key_kernel` `(features, heads *
      key_dim)` by columns: whole heads where the mesh axis divides them.
    - `TransformerEncoder` and `TransformerDecoder` shard their attention as
      above and their feed-forward network Megatron-style:
      `feedforward_intermediate_dense` by columns, `feedforward_output_dense`
      by rows.

    Every other weight (embeddings, normalisation, the output biases) is
    replicated. The sharded sizes (the heads, `3 * units`, the feed-forward
    size) must divide by the size of `model_axis`. The map is an ordinary
    `LayoutMap`: add entries for your own layers before making the
    distribution. Weights are matched by the end of their path, so a layer
    of your own whose weight path ends like one above (say a `Dense` named
    `query`) is matched too.

    Args:
        device_mesh: A `keras.distribution.DeviceMesh`, for example of shape
            `(data, model)` with axis names `("batch", "model")`.
        model_axis: The mesh axis that the heads are split over.
            Defaults to `"model"`.

    Returns:
        A `keras.distribution.LayoutMap` on `device_mesh`.

    Raises:
        ValueError: `device_mesh` is not a `DeviceMesh`, or `model_axis` is
            not one of its axis names.

    Example:

    >>> mesh = keras.distribution.DeviceMesh(
    ...     (1, 2), ["batch", "model"], devices=["cpu:0", "cpu:1"]
    ... )
    >>> layouts = layout_map(mesh)
    >>> layouts["encoder/self_attention_layer/query/kernel"].axes
    (None, 'model', None)
    >>> layouts["encoder/feedforward_intermediate_dense/kernel"].axes
    (None, 'model')
    >>> layouts["encoder/self_attention_layer_norm/gamma"] is None  # replicated
    True

    On JAX, with all the devices of the machine in a mesh, layers built
    after `set_distribution` are sharded:

    ```python
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (1, len(devices)), ["batch", "model"], devices=devices
    )
    keras.distribution.set_distribution(
        keras.distribution.ModelParallel(
            layout_map=keras_selfattn.layout_map(mesh), batch_dim_name="batch"
        )
    )
    encoder = keras_selfattn.TransformerEncoder(1024, num_heads=8)
    ```
    """
    if not isinstance(device_mesh, keras.distribution.DeviceMesh):
        raise invalid("device_mesh", "a `keras.distribution.DeviceMesh`", device_mesh)
    if model_axis not in device_mesh.axis_names:
        raise invalid(
            "model_axis",
            f"one of the device mesh's axis names {list(device_mesh.axis_names)}",
            model_axis,
        )
    layouts = keras.distribution.LayoutMap(device_mesh)
    for suffix, axes in _SHARDS.items():
        layouts[f"(.*/)?{suffix}"] = tuple(
            model_axis if axis == "model" else None for axis in axes
        )
    return layouts
