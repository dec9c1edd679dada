"""TokenAndPositionEmbedding: token ids -> token plus learned position vectors."""

from __future__ import annotations

import keras
from keras import ops

from keras_selfattn import _backend
from keras_selfattn._validation import check_bool, check_positive_int, check_rank
from keras_selfattn.layers._common import (
    dtype_recording_quantized,
    embedded_ids,
    set_weight_options,
    take_own_policies,
    weight_options_config,
    zero_padded,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Sum of a token embedding and a learned position embedding.

    Shapes: integer ids `(batch, seq)` in, `(batch, seq, embedding_dim)` out,
    with `seq <= sequence_length`.

    Position `t` of every sequence gets the same learned vector, added to the
    embedding of the token found there. This is how the Transformer encoder
    learns word order, since attention alone is blind to it.

    Masking: with `mask_zero=True` (the default) id `0` is padding, as
    `TextVectorization` produces it. The layer then outputs zeros at padded
    positions and hands the Keras mask `ids != 0` on to the next layers, so
    attention gives padded keys exactly zero weight. With `mask_zero=False`
    every position is real and no mask is produced.

    Token ids outside `[0, vocabulary_size)`, and float ids that are not
    whole (`3.0` is id 3, `2.7` no id), raise a `ValueError` where the
    call can read them: eagerly, as in a direct call or PyTorch's `fit`.
    Inside a compiled function (TensorFlow's and JAX's `fit` and `predict`,
    an export) TensorFlow's CPU kernel raises its `InvalidArgumentError`
    ("indices[...] = 10 is not in [0, 10)"), a negative id included; where
    nothing can raise (JAX, XLA, a GPU) their positions output NaN, rather
    than the row counted from the end for a negative id, or the last row
    (XLA clamps) or zeros (TensorFlow's GPU kernel) for a large one.

    Not a drop-in for keras-hub's `TokenAndPositionEmbedding`: that layer
    defaults to `mask_zero=False`, initializes its positions with
    `embeddings_initializer`, ties a `ReversibleEmbedding` (`tie_weights`)
    and takes `start_index` and `positions` in its call; this one masks id 0
    by default, has its own `position_initializer`, a plain
    `keras.layers.Embedding`, and positions from 0 (see the docs' layers
    page).

    Args:
        vocabulary_size: Positive integer, the number of token ids
            (ids are in `[0, vocabulary_size)`).
        sequence_length: Positive integer, the longest sequence the layer
            accepts (the number of position vectors).
        embedding_dim: Positive integer, the size of the output vectors.
        mask_zero: Boolean, whether id `0` is padding. Defaults to `True`.
        embeddings_initializer: Initializer for the token embeddings.
            Defaults to `"uniform"` (as `keras.layers.Embedding`).
        position_initializer: Initializer for the position embeddings.
            Defaults to `"glorot_uniform"`.
        **kwargs: Base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of token ids, `(batch, seq)`: integers, or floats
            that are whole numbers.

    Returns:
        Tensor `(batch, seq, embedding_dim)`; its Keras mask is `ids != 0`
        when `mask_zero=True`.

    Example:

    >>> ids = np.array([[5, 8, 2, 0, 0]])
    >>> layer = TokenAndPositionEmbedding(10, sequence_length=5,
    ...                                   embedding_dim=4)
    >>> tuple(layer(ids).shape)
    (1, 5, 4)
    >>> keras.ops.convert_to_numpy(layer.compute_mask(ids))
    array([[ True,  True,  True, False, False]])
    """

    def __init__(
        self,
        vocabulary_size: int,
        sequence_length: int,
        embedding_dim: int,
        mask_zero: bool = True,
        embeddings_initializer="uniform",
        position_initializer="glorot_uniform",
        **kwargs,
    ):
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("sequence_length", sequence_length)
        check_positive_int("embedding_dim", embedding_dim)
        check_bool("mask_zero", mask_zero)
        super().__init__(**kwargs)
        # Keras's Embedding takes only Python integers (ours NumPy's too).
        self.vocabulary_size = int(vocabulary_size)
        self.sequence_length = int(sequence_length)
        self.embedding_dim = int(embedding_dim)
        self.mask_zero = mask_zero
        set_weight_options(
            self,
            embeddings_initializer=embeddings_initializer,
            position_initializer=position_initializer,
        )
        self.supports_masking = mask_zero
        # Ids are not cast to the compute dtype (as in Keras's `Embedding`):
        # in bfloat16, float id 257.0 would become 256.0.
        self.autocast = False
        self.token_embedding = keras.layers.Embedding(
            self.vocabulary_size,
            self.embedding_dim,
            embeddings_initializer=self.embeddings_initializer,
            dtype=self.dtype_policy,
            name="token_embedding",
        )

    def build(self, input_shape):
        check_rank("inputs", input_shape, 2, "(batch, seq) of token ids")
        # A `keras.Input` longer than the table fails here, not at `predict`.
        self._check_length(_backend.comparable_dim(input_shape[1]))
        self.token_embedding.build(input_shape)
        take_own_policies([self.token_embedding])  # a loaded quantized one
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.sequence_length, self.embedding_dim),
            initializer=self.position_initializer,
        )

    def _check_length(self, length) -> None:
        if length is not None and length > self.sequence_length:
            raise ValueError(
                "Received an invalid value for argument `inputs`, expected "
                f"sequences of at most `sequence_length={self.sequence_length}` "
                f"tokens. Received: inputs with {length} tokens"
            )

    def call(self, inputs):
        check_rank("inputs", inputs.shape, 2, "(batch, seq) of token ids")
        # JAX's symbolic length (`model.export` of an unknown length) counts
        # as unknown: it cannot be compared with a number.
        static_length = _backend.comparable_dim(inputs.shape[1])
        self._check_length(static_length)
        tokens = embedded_ids(self.token_embedding, inputs, "inputs")
        if static_length == 0:
            # A text with no token. (Keras's TensorFlow `add` would take the
            # (1, 0, dim) positions for a bias of size dim, and fail.)
            return tokens
        table = ops.convert_to_tensor(self.position_embeddings)
        positions = ops.cast(
            _backend.leading_rows(table, ops.shape(inputs)[1]), tokens.dtype
        )
        outputs = ops.add(tokens, ops.expand_dims(positions, 0))
        return zero_padded(outputs, self.compute_mask(inputs))

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, 0)

    def compute_output_shape(self, input_shape):
        return (*tuple(input_shape), self.embedding_dim)

    def get_config(self):
        base_config = super().get_config()
        config = {
            "vocabulary_size": self.vocabulary_size,
            "sequence_length": self.sequence_length,
            "embedding_dim": self.embedding_dim,
            "mask_zero": self.mask_zero,
            **weight_options_config(
                self, "embeddings_initializer", "position_initializer"
            ),
        }
        # After `model.quantize`, the token embedding's quantized policy
        # (as keras-hub's layer, the config forgot it, and a saved quantized
        # model failed to load: "expected 1 variables, but received 2").
        dtype = dtype_recording_quantized(self, [self.token_embedding])
        if dtype is not None:
            config["dtype"] = dtype
        return {**base_config, **config}
