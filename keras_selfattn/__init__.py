"""Keras 3 attention layers that compute softmax(Q Kᵀ / sqrt(d_k)) V exactly.

Public API:

- `scaled_dot_product_attention`: the kernel every layer calls.
- `SelfAttention`: self-attention on one tensor (fits `keras.Sequential`).
- `MultiHeadAttention`: a drop-in for `keras.layers.MultiHeadAttention`.
"""

from keras_selfattn.attention import scaled_dot_product_attention
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.self_attention import SelfAttention

__version__ = "0.1.0"

__all__ = [
    "MultiHeadAttention",
    "SelfAttention",
    "__version__",
    "scaled_dot_product_attention",
]
