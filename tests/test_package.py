"""The package stands alone: its import loads no demo, and saved demo models
load with nothing but `import keras_selfattn`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import needs_keras

DATA = Path(__file__).parent / "data"


def _run(code: str, env, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def test_import_loads_no_demo_module(subprocess_env):
    code = (
        "import sys, keras_selfattn\n"
        "print([m for m in sys.modules if m.startswith('keras_selfattn.imdb')])\n"
    )
    assert _run(code, subprocess_env) == "[]"


@pytest.mark.tensorflow_only  # TextVectorization runs on TensorFlow.
@needs_keras("3.15", "the model was saved by Keras 3.15: GlorotUniform's input_axes")
def test_demo_model_saved_before_the_move_loads_with_the_library_only(
    subprocess_env,
):
    # tests/data/imdb_demo_v0.1.keras was saved by commit fa5a0f5, when the
    # text pieces lived in keras_selfattn.imdb.text; its JSON holds the
    # probabilities that model gave then.
    expected = json.loads((DATA / "imdb_demo_v0.1.json").read_text())
    code = (
        "import json, sys, numpy as np, keras, keras_selfattn\n"
        "model = keras.models.load_model(sys.argv[1])\n"
        "texts = np.array(json.loads(sys.argv[2]), dtype=object)\n"
        "p = model.predict(texts, verbose=0)[:, 0].tolist()\n"
        "demo = [m for m in sys.modules if m.startswith('keras_selfattn.imdb')]\n"
        "print(json.dumps([p, demo]))\n"
    )
    line = _run(
        code,
        subprocess_env,
        str(DATA / "imdb_demo_v0.1.keras"),
        json.dumps(expected["texts"]),
    )
    probabilities, demo_modules = json.loads(line)
    assert demo_modules == []
    np.testing.assert_allclose(probabilities, expected["probabilities"], rtol=1e-6)


@pytest.mark.backend_independent
def test_all_names_every_public_name_and_the_docstring_lists_them():
    import importlib
    import inspect
    import pkgutil

    import keras_selfattn
    from keras_selfattn import attention, layers, sharding

    # `keras_selfattn.convert` is the function; its module is in sys.modules.
    conversion = importlib.import_module("keras_selfattn.convert")
    public = {
        "__version__",
        *attention.__all__,
        *sharding.__all__,
        *conversion.__all__,
    }
    for info in pkgutil.iter_modules(layers.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{layers.__name__}.{info.name}")
        public |= {
            name
            for name, value in vars(module).items()
            if inspect.isclass(value)
            and value.__module__ == module.__name__
            and not name.startswith("_")
        }
    assert sorted(keras_selfattn.__all__) == sorted(public)
    assert all(getattr(keras_selfattn, name) is not None for name in public)
    for name in public - {"__version__"}:
        assert f"`{name}`" in keras_selfattn.__doc__, name
