"""The IMDB sentiment demo, read top to bottom.

- `data`: the reviews (`load`: bundled, an aclImdb folder, keras.datasets).
- `model`: `build_model`, `compile_model`, `evaluate`, the layer names.
- `ngrams`: the n-gram branch as NB-LR, fitted after training, and its
  blend with the attention branch.
- `train`: `TrainConfig` and `train(config)`.
- `explain`: which words decided, and their picture.
- `cli`: the `keras-selfattn` command (arguments and dispatch only).

`import keras_selfattn` never imports this package; the text pieces that
saved demo models refer to live in the library (`keras_selfattn.text`).
"""
