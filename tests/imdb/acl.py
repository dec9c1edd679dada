"""Tiny data sets that the demo's tests write themselves."""

from __future__ import annotations

from pathlib import Path


def write_acl(root: Path, n_train: int, n_test: int) -> Path:
    """A tiny aclImdb folder of easy synthetic reviews."""
    words = {"pos": ["great", "superb", "loved"], "neg": ["awful", "boring", "hated"]}
    for split, n in (("train", n_train), ("test", n_test)):
        for label, mood in words.items():
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(n // 2):
                text = f"The film was {mood[i % 3]}, I {mood[(i + 1) % 3]} it."
                (folder / f"{i}_1.txt").write_text(text)
    return root
