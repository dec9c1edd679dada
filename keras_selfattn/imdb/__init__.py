"""The IMDB sentiment demo: data, model, command line and explain picture.

Importing this package stays light (Keras only): it registers the text
standardization and the two small layers that saved models refer to, so that
they load after `import keras_selfattn`. Use the submodules:

- `keras_selfattn.imdb.data`: the loaders (`load`, `load_bundled`, ...).
- `keras_selfattn.imdb.model`: `build_model`, `compile_model`, `ReviewBatches`.
- `keras_selfattn.imdb.explain`: the attention picture.
- `keras_selfattn.imdb.cli`: the `keras-selfattn` command.
"""

from keras_selfattn.imdb.text import BigramEmbedding, ClipSequence, standardize

__all__ = ["BigramEmbedding", "ClipSequence", "standardize"]
