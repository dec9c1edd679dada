"""The IMDB sentiment demo: data, model, command line and explain picture.

Importing this package stays light: it registers the text standardization
that saved models refer to and nothing else. Use the submodules:

- `keras_selfattn.imdb.data`: the loaders (`load`, `load_bundled`, ...).
- `keras_selfattn.imdb.model`: `build_model`, `train`.
- `keras_selfattn.imdb.explain`: the attention picture.
- `keras_selfattn.imdb.cli`: the `keras-selfattn` command.
"""

from keras_selfattn.imdb.text import BigramEmbedding, ClipSequence, standardize

__all__ = ["BigramEmbedding", "ClipSequence", "standardize"]
