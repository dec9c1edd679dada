"""The Python examples of the README and the docs pages run, and do what their
comments say.

Every ```` ```python ```` block of README.md and docs/*.md has an entry in
`EXAMPLES`, by page and first line: a new block fails
`test_every_example_has_an_entry` until it gets one. An entry gives what the
page's prose (or an earlier block) supplies to a fragment (the `q`, `v`, `x`
it names), the checks of what the block's comments claim, and, where the
block cannot run in this pass, why. Each block runs in a fresh namespace in a
temporary folder (they write `model.keras`, `model.onnx`, ...).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import pytest

from tests.helpers import BACKEND, release

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# Any fence of Python code, indented (in a list) or written ```py too.
_ANY_PYTHON_FENCE = re.compile(r"^[ \t]*(?:```|~~~)[ \t]*(?:python|py|python3)\b", re.M)


@dataclasses.dataclass(frozen=True)
class Example:
    """How one block of a page runs.

    Attributes:
        setup: code run before the block: what the page's prose supplies.
        check: code run after it, asserting what its comments say.
        after: first lines of blocks of the same page that run before it (in
            the same namespace, each with its setup and checks), for a block
            that continues others.
        part_of: the first line of the entry whose `after` runs this block
            (it has no test of its own).
        backends: the backends it runs on, with `why` saying why not others.
        keras: the oldest Keras it runs on.
        needs: modules it imports that an install may lack.
        skip: why it never runs in the tests (and what runs in its place).
        marks: pytest marks (a slow block, one that needs TensorFlow).
        fresh_process: run in a new Python process with these extra
            environment variables (a block that needs devices set up before
            JAX starts).
    """

    setup: str = ""
    check: str = ""
    after: tuple[str, ...] = ()
    part_of: str = ""
    backends: tuple[str, ...] = ("tensorflow", "jax", "torch")
    why: str = ""
    keras: str = "3.0"
    needs: tuple[str, ...] = ()
    skip: str = ""
    marks: tuple[pytest.MarkDecorator, ...] = ()
    fresh_process: dict[str, str] | None = None


# The Sequential model of the README, getting-started.md: saved, it loads
# without custom_objects and gives the same outputs.
_SEQUENTIAL = """
import keras
import numpy as np
ids = np.array([[3, 7, 9, 0, 0], [5, 2, 0, 0, 0]])
loaded = keras.models.load_model("model.keras")
np.testing.assert_allclose(
    keras.ops.convert_to_numpy(loaded(ids)), keras.ops.convert_to_numpy(model(ids)),
    rtol=0, atol=1e-6)
"""
_OURS_EQUALS_THEIRS = """
np.testing.assert_allclose(
    keras.ops.convert_to_numpy(ours({args})),
    keras.ops.convert_to_numpy(theirs({args})), rtol=0, atol=1e-5)
"""
_QV = """
import keras
import numpy as np
q = keras.random.normal((2, 10, 512), seed=1)
v = keras.random.normal((2, 12, 512), seed=2)
"""
_MHA_PARITY = Example(
    setup="import keras\nimport numpy as np",  # the page's first block
    check=_OURS_EQUALS_THEIRS.format(args="x, x"),
)
_GQA_KERAS = "3.15"
_MQA = "layouts = keras_selfattn.layout_map(mesh)"

EXAMPLES: dict[tuple[str, str], Example] = {
    ("README.md", "import numpy as np"): Example(
        check="""
import keras
from tests.reference import reference_attention
assert out.shape == (2, 5, 4, 8) and w.shape == (2, 4, 5, 5)
expected, weights = reference_attention(q, q, q, mask=padding[:, None, :], causal=True)
np.testing.assert_allclose(keras.ops.convert_to_numpy(w), weights, atol=1e-6)
assert (keras.ops.convert_to_numpy(w)[1, :, :, 3:] == 0).all()
np.testing.assert_allclose(keras.ops.convert_to_numpy(out), expected, atol=1e-5)
"""
    ),
    ("README.md", "import keras"): Example(check=_SEQUENTIAL),
    ("README.md", "from keras_selfattn import MultiHeadAttention"): _MHA_PARITY,
    ("docs/getting-started.md", "import numpy as np"): Example(
        check="""
import keras
from tests.reference import reference_attention
assert out.shape == (2, 5, 4, 8) and w.shape == (2, 4, 5, 5)
expected, _ = reference_attention(q, q, q, mask=padding[:, None, :])
np.testing.assert_allclose(keras.ops.convert_to_numpy(out), expected, atol=1e-5)
"""
    ),
    ("docs/getting-started.md", "import keras"): Example(check=_SEQUENTIAL),
    (
        "docs/getting-started.md",
        "from keras_selfattn import MultiHeadAttention",
    ): _MHA_PARITY,
    ("docs/index.md", "import keras"): Example(
        check="""
import numpy as np
probabilities = keras.ops.convert_to_numpy(model(np.array([[4, 8, 15, 0, 0]])))
assert probabilities.shape == (1, 1) and 0 < probabilities[0, 0] < 1
"""
    ),
    (
        "docs/layers.md",
        "from keras_selfattn import scaled_dot_product_attention",
    ): Example(
        setup="""
import numpy as np
rng = np.random.default_rng(0)
q = rng.normal(size=(2, 6, 4, 8)).astype("float32")
k = rng.normal(size=(2, 7, 2, 8)).astype("float32")  # 2 kv heads
v = rng.normal(size=(2, 7, 2, 5)).astype("float32")
mask = rng.random((2, 6, 7)) < 0.7
lengths_mask = np.arange(7)[None, :] < np.array([[7], [4]])
""",
        check="""
import keras
from tests.reference import reference_attention
expected, weights = reference_attention(q, k, v, mask=mask, causal=True)
np.testing.assert_allclose(keras.ops.convert_to_numpy(w), weights, atol=1e-6)
expected, _ = reference_attention(q, k, v, mask=lengths_mask[:, None, :])
assert out.shape == (2, 6, 4, 5)
np.testing.assert_allclose(keras.ops.convert_to_numpy(out), expected, atol=1e-5)
""",
    ),
    ("docs/layers.md", "import keras"): Example(
        check="""
import numpy as np
assert tuple(out.shape) == (2, 10, 64) and tuple(scores.shape) == (2, 4, 10, 10)
assert SelfAttention(4)(x).shape == (50, 5, 4)
assert model(np.array([[4, 8, 15, 0]])).shape == (1, 1)
"""
    ),
    ("docs/layers.md", "from keras_selfattn import MultiHeadAttention"): Example(
        setup=_QV, check=_OURS_EQUALS_THEIRS.format(args="q, v")
    ),
    ("docs/layers.md", "from keras_selfattn import GroupQueryAttention"): Example(
        setup=_QV,
        check=_OURS_EQUALS_THEIRS.format(args="q, v"),
        keras=_GQA_KERAS,
    ),
    ("docs/layers.md", "import keras_hub"): Example(
        setup="import keras\nimport numpy as np\nx = keras.random.normal((2, 10, 16))",
        check=_OURS_EQUALS_THEIRS.format(args="x"),
        needs=("keras_hub",),
    ),
    ("docs/existing-models.md", "import keras_hub"): Example(
        # The block's comments are what it prints, up to their "# ...".
        check="""
printed = str(report).splitlines()
commented = [line[2:] for line in EXAMPLE_SOURCE.splitlines()
             if line.startswith("# ")]
shown = commented[: commented.index("...")]
assert printed[: len(shown)] == shown, (printed, shown)
""",
        needs=("keras_hub",),
        marks=(pytest.mark.slow,),
    ),
    ("docs/export.md", "import keras"): Example(
        # Each file runs where the page says, as the model does (on Keras 3.7
        # a format="onnx" export wrote a SavedModel folder named model.onnx).
        check="""
import onnxruntime
import tensorflow as tf
from ai_edge_litert import interpreter
ids = np.zeros((1, 512), "int32")
ids[0, :20] = np.arange(1, 21)
expected = keras.ops.convert_to_numpy(model(ids))
session = onnxruntime.InferenceSession("model.onnx")
(onnx_out,) = session.run(None, {session.get_inputs()[0].name: ids})
runner = interpreter.Interpreter(model_path="model.tflite").get_signature_runner()
litert_out = runner(**{next(iter(runner.get_input_details())): ids})["output_0"]
loaded = tf.saved_model.load("saved_model")  # kept: .serve needs its variables
saved_out = loaded.serve(ids)
for got in (onnx_out, litert_out, saved_out):
    np.testing.assert_allclose(np.asarray(got), expected, rtol=0, atol=1e-5)
""",
        backends=("tensorflow",),
        why=(
            "the block exports all three formats, as only TensorFlow's Keras"
            " does (the page's table); tests/test_export.py exports each"
            " backend's formats"
        ),
        keras="3.13",  # format="litert"; "onnx" since 3.8
        marks=(pytest.mark.slow,),
    ),
    ("docs/demo.md", "import dataclasses"): Example(
        skip=(
            "it trains two models on 2,000 reviews each; tests/imdb/test_train.py"
            " and tests/imdb/test_model.py run train(TrainConfig(...)), its"
            " attention='keras' arm and evaluate() on small data"
        ),
    ),
    ("docs/scaling.md", "# train_jax.py"): Example(
        skip=(
            "it needs two processes on two machines;"
            " tests/test_sharding.py::test_data_parallel_fit_on_two_processes_"
            "equals_one_process_on_the_global_batch runs the same program on two"
            " processes on 127.0.0.1"
        ),
    ),
    # The model-parallel section's three blocks run in one JAX process with
    # eight virtual CPU devices, in the page's order.
    ("docs/scaling.md", "import keras, keras_selfattn"): Example(
        check="""
import numpy as np
model = keras.Sequential([keras.Input((8, 64)), encoder])  # 4 heads a device
model(np.zeros((2, 8, 64), "float32"))
kernel = encoder._self_attention_layer._query_dense.kernel
assert tuple(kernel.value.sharding.spec) == (None, "model", None), kernel.value.sharding
""",
        part_of=_MQA,
    ),
    ("docs/scaling.md", "import jax"): Example(part_of=_MQA),
    ("docs/scaling.md", _MQA): Example(
        after=("import keras, keras_selfattn", "import jax"),
        check="""
keras.distribution.set_distribution(
    keras.distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch"))
mqa = keras_selfattn.GroupQueryAttention(
    head_dim=8, num_query_heads=4, num_key_value_heads=1, name="mqa")
x = keras.Input((8, 32))
model = keras.Model(x, mqa(x, x))
model(np.zeros((2, 8, 32), "float32"))
assert tuple(mqa._key_dense.kernel.value.sharding.spec) == (None, None, None)
assert tuple(mqa._query_dense.kernel.value.sharding.spec) == (None, "model", None)
""",
        backends=("jax",),
        why="keras.distribution's ModelParallel is JAX's",
        keras=_GQA_KERAS,
        fresh_process={"XLA_FLAGS": "--xla_force_host_platform_device_count=8"},
        marks=(pytest.mark.slow, pytest.mark.distributed),
    ),
}


def python_blocks(page: str) -> dict[str, tuple[int, str]]:
    """A page's ```python blocks by first line: (line number, source)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    fences = len(_ANY_PYTHON_FENCE.findall(text))
    found = list(_BLOCK.finditer(text))
    assert fences == len(found), (
        f"{page}: a Python block this test cannot read (write it as ```python"
        " at the start of a line)"
    )
    blocks = {}
    for match in found:
        source = match.group(1)
        first = source.splitlines()[0]
        assert first not in blocks, f"{page}: two blocks start with {first!r}"
        blocks[first] = (text.count("\n", 0, match.start()) + 2, source)
    return blocks


def program(page: str, first: str) -> str:
    """The code one entry runs: the blocks it continues, then its own, each
    with its setup before it and its checks after it (a block named by page
    and line in tracebacks)."""
    blocks = python_blocks(page)
    parts = []
    for name in (*EXAMPLES[page, first].after, first):
        example = EXAMPLES[page, name]
        line, source = blocks[name]
        parts += [
            example.setup,
            f"EXAMPLE_SOURCE = {source!r}",
            f"# {page}:{line}\n{source}",
            example.check,
        ]
    return "\n".join(textwrap.dedent(part) for part in parts)


def _cases():
    for page, first in EXAMPLES:
        example = EXAMPLES[page, first]
        if example.part_of:
            continue
        line = python_blocks(page).get(first, (0, ""))[0]
        yield pytest.param(page, first, id=f"{page}:{line}", marks=example.marks)


def test_every_example_has_an_entry():
    blocks = {(page, first) for page in PAGES for first in python_blocks(page)}
    assert blocks - EXAMPLES.keys() == set(), "blocks without an entry in EXAMPLES"
    assert EXAMPLES.keys() - blocks == set(), "entries whose block is gone"


@pytest.mark.parametrize(("page", "first"), _cases())
def test_example_runs(page, first, tmp_path, monkeypatch, subprocess_env):
    example = EXAMPLES[page, first]
    if example.skip:
        pytest.skip(f"not run: {example.skip}")
    if BACKEND not in example.backends:
        pytest.skip(f"runs on {', '.join(example.backends)}: {example.why}")
    if release(keras.__version__) < release(example.keras):
        pytest.skip(f"needs Keras {example.keras}; this is {keras.__version__}")
    for module in example.needs:
        # keras-hub 0.32 does not import on the Keras floor (an ImportError of
        # a name, not ModuleNotFoundError).
        pytest.importorskip(module, exc_type=ImportError)
    code = program(page, first)
    if example.fresh_process is not None:
        env = {**subprocess_env, **example.fresh_process, "PYTHONPATH": str(ROOT)}
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        return
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, f"{page}:{first}", "exec"), {"__name__": "__main__"})
