"""`python -m keras_selfattn`: the `keras-selfattn` command line."""

from keras_selfattn.imdb.cli import run

if __name__ == "__main__":
    run()
