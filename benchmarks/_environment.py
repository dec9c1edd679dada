"""What every benchmark prints first: the date, the command, the machine, the
versions."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys


def now() -> str:
    """The date and time in UTC, to the minute: when a run started or ended."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def command() -> str:
    """The exact command line of this process."""
    return shlex.join([sys.executable, *sys.argv])


def machine() -> str:
    """The CPU model, its cores, the RAM and the load average at start."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    ram = ""
    try:
        with open("/proc/meminfo") as f:
            ram = f", {int(f.readline().split()[1]) * 1024 / 1e9:.0f} GB RAM"
    except (OSError, ValueError, IndexError):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{model}, {os.cpu_count()} cores{ram}; load average {load:.2f} at start"


def versions() -> str:
    """Python, Keras, the backend's library, keras_selfattn and NumPy, and
    the accelerator the backend computes on (or "CPU")."""
    import keras
    import numpy

    import keras_selfattn

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        library = f"JAX {jax.__version__}"
        device = jax.devices()[0]
        accelerator = "CPU" if device.platform == "cpu" else device.device_kind
    elif backend == "torch":
        import torch

        library = f"PyTorch {torch.__version__}"
        cuda = torch.cuda.is_available()
        accelerator = torch.cuda.get_device_name(0) if cuda else "CPU"
    else:
        import tensorflow as tf

        library = f"TensorFlow {tf.__version__}"
        gpus = tf.config.list_physical_devices("GPU")
        accelerator = ", ".join(gpu.name for gpu in gpus) or "CPU"
    return (
        f"Python {platform.python_version()}, Keras {keras.__version__} "
        f"(backend {backend}), {library}, keras_selfattn "
        f"{keras_selfattn.__version__}, NumPy {numpy.__version__}; device: "
        f"{accelerator}"
    )


def header() -> str:
    """The four lines: date (the start, in UTC), command, machine, versions."""
    return (
        f"date: {now()}\ncommand: {command()}\nmachine: {machine()}\n"
        f"versions: {versions()}"
    )
