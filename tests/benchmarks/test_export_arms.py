"""benchmarks/export.py: its plain arm is the plain path on any machine."""

from __future__ import annotations

import pytest

from keras_selfattn import attention
from tests.helpers import needs_keras

pytestmark = [
    pytest.mark.tensorflow_only,  # the ONNX export
    needs_keras("3.8", 'model.export(format="onnx")'),
]


def test_the_plain_arm_stays_plain_under_a_small_memory_budget(tmp_path, monkeypatch):
    # With the default budget (half the free memory) a machine short of
    # memory chunked the "plain" arm: the comparison measured one path twice.
    import onnx

    from benchmarks import export as bench

    monkeypatch.setenv(attention.MEMORY_BUDGET_ENV, "1000")
    monkeypatch.setitem(attention._budget, "default", None)
    monkeypatch.setitem(attention._budget, "set", None)
    path = tmp_path / "plain.onnx"
    bench._child_export("plain", 64, str(path))
    nodes = [node.op_type for node in onnx.load(path).graph.node]
    assert "Loop" not in nodes and "MatMul" in nodes
    path = tmp_path / "chunked.onnx"
    bench._child_export("chunked", 512, str(path))
    assert "Loop" in [node.op_type for node in onnx.load(path).graph.node]
