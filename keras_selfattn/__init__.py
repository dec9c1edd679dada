"""Keras 3 attention layers that compute softmax(Q Kᵀ / sqrt(d_k)) V exactly.

Public API:

- `scaled_dot_product_attention`: the kernel every layer calls.
- `masked_softmax`: the kernel's float32, mask-aware softmax on its own.
- `plan_attention`, `AttentionPlan`: the kernel's choice of path (the rules).
- `set_memory_budget`, `memory_budget`: the memory budget that choice uses.
- `SelfAttention`: self-attention on one tensor (fits `keras.Sequential`).
- `MultiHeadAttention`: a drop-in for `keras.layers.MultiHeadAttention`.
- `CachedMultiHeadAttention`: a drop-in for keras-hub's cached attention
  (key/value cache for autoregressive decoding).
- `GroupQueryAttention`: a drop-in for `keras.layers.GroupQueryAttention`
  (grouped-query attention; Keras 3.15 or newer).
- `AttentionPooling`: a learned, mask-aware attention-weighted average over time.
- `TokenAndPositionEmbedding`: token plus position embedding, padding id 0 masked.
- `TransformerEncoder`: one encoder block, a drop-in for keras-hub's.
- `TransformerDecoder`: one decoder block (caches for decoding), a drop-in
  for keras-hub's.
- `convert`: makes an existing model's Keras and keras-hub attention layers
  compute through the kernel, in place; returns a `ConversionReport`.
- `layout_map`: how the layers shard under `keras.distribution.ModelParallel`.
"""

# First, before Keras loads: in the `keras-selfattn` command line only, the
# demo's check and a quiet TensorFlow start-up (a no-op in any other process).
from keras_selfattn import _launcher  # noqa: F401

# Registers the text pieces that saved models refer to (the standardization,
# ClipSequence, BigramEmbedding), so they load after `import keras_selfattn`.
from keras_selfattn import text as _text  # noqa: F401
from keras_selfattn.attention import (
    AttentionPlan,
    masked_softmax,
    memory_budget,
    plan_attention,
    scaled_dot_product_attention,
    set_memory_budget,
)
from keras_selfattn.convert import ConversionReport, convert
from keras_selfattn.layers.cached_attention import CachedMultiHeadAttention
from keras_selfattn.layers.decoder import TransformerDecoder
from keras_selfattn.layers.encoder import TransformerEncoder
from keras_selfattn.layers.grouped_query_attention import GroupQueryAttention
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.pooling import AttentionPooling
from keras_selfattn.layers.position import TokenAndPositionEmbedding
from keras_selfattn.layers.self_attention import SelfAttention
from keras_selfattn.sharding import layout_map

__version__ = "0.2.0.dev0"

__all__ = [
    "AttentionPlan",
    "AttentionPooling",
    "CachedMultiHeadAttention",
    "ConversionReport",
    "GroupQueryAttention",
    "MultiHeadAttention",
    "SelfAttention",
    "TokenAndPositionEmbedding",
    "TransformerDecoder",
    "TransformerEncoder",
    "__version__",
    "convert",
    "layout_map",
    "masked_softmax",
    "memory_budget",
    "plan_attention",
    "scaled_dot_product_attention",
    "set_memory_budget",
]
