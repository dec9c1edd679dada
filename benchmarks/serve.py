"""Load on `keras-selfattn serve`: concurrent clients, throughput, latency, correctness.

Starts `keras-selfattn serve MODEL --port 0` in a subprocess on 127.0.0.1 and
sends, from client threads of this process (each with its own keep-alive
connection, in loops bounded by the number of requests):

- `/v1/predict`: `--requests` requests (2,000) from `--clients` clients (8),
  each with 1 to 16 reviews of the bundled test split, drawn with `--seed`;
- `/v1/explain`: `--explain-requests` requests (200) of one review each, from
  `--explain-clients` clients (2).

Every answer is checked against the model run in this process (the same
`.keras` file): the status, the number of predictions, each probability within
1e-5 (a text batched with other requests is padded differently) and each
label; for explanations, the tokens and the probability. The report counts
the requests not answered (dropped) and the answers that do not match
(garbled). The floor the server adds to: the same `/v1/predict` batches sent,
one at a time, to the exported SavedModel loaded in this process
(`tf.saved_model.load(...).signatures["serving_default"]`), and `explain()`
called in this process for the explanations. Floor and server alternate, in
`--rounds` parts of the requests (4), so that a change in the machine's load
falls on both. It reports requests per second and the p50, p95 and p99
latency of each, with the machine, its load, the versions and the command.

    python benchmarks/serve.py imdb.keras
    python benchmarks/serve.py small.keras --requests 500 --explain-requests 50

Never run as a test (timings vary with the machine's load).
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import re
import selectors
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from importlib.metadata import version

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

PROBABILITY_ATOL = 1e-5


def start_server(model: str, log) -> tuple[subprocess.Popen, str]:
    """`keras-selfattn serve model --port 0`, and its URL once it listens."""
    command = [sys.executable, "-m", "keras_selfattn", "serve", model, "--port", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
    deadline = time.monotonic() + 300
    with selectors.DefaultSelector() as selector:
        selector.register(server.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=1):
                continue
            line = server.stdout.readline()
            if not line:
                break  # it exited
            found = re.search(r" on (http://\S+?)/ ", line)
            if found:
                return server, found.group(1)
    server.kill()
    raise SystemExit(f"the server did not start; its log: {log.name}")


def percentiles(seconds: list[float]) -> str:
    import numpy as np

    p50, p95, p99 = np.percentile(np.array(seconds) * 1e3, [50, 95, 99])
    return f"{p50:8.1f} {p95:8.1f} {p99:8.1f}"


def drive(url: str, clients: int, jobs: list, send) -> tuple[float, list, list]:
    """Runs `send(http, job)` for every job from `clients` threads, each with
    its own `httpx2.Client` on `url`.

    Returns the wall time, and per job its latency and its answer (or the
    exception that stopped it).
    """
    import httpx2

    latencies, answers = [None] * len(jobs), [None] * len(jobs)
    counter, lock = itertools.count(), threading.Lock()

    def client():
        with httpx2.Client(base_url=url, timeout=120) as http:
            while True:
                with lock:
                    i = next(counter)
                if i >= len(jobs):
                    return
                start = time.perf_counter()
                try:
                    answers[i] = send(http, jobs[i])
                except Exception as error:  # counted as dropped
                    answers[i] = error
                latencies[i] = time.perf_counter() - start

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, latencies, answers


def report(name: str, clients: int, wall: float, latencies: list, jobs: list) -> str:
    texts = sum(len(job) if isinstance(job, list) else 1 for job in jobs)
    return (
        f"{name:<28} {clients:>7} {len(jobs):>8} {len(jobs) / wall:>8.1f} "
        f"{texts / wall:>8.1f} {percentiles(latencies)}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the .keras file to serve")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--explain-requests", type=int, default=200)
    parser.add_argument("--explain-clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    from keras_selfattn.imdb import data
    from keras_selfattn.imdb.explain import explain
    from keras_selfattn.imdb.export import export, label_of
    from keras_selfattn.imdb.model import load
    from keras_selfattn.imdb.train import cpu_name

    load_before = os.getloadavg()[0]
    reviews = data.load_bundled().test_texts
    rng = np.random.default_rng(args.seed)
    jobs = [
        [reviews[i] for i in rng.choice(len(reviews), rng.integers(1, 17))]
        for _ in range(args.requests)
    ]
    explain_jobs = [reviews[i] for i in rng.choice(len(reviews), args.explain_requests)]

    # The references, from the model in this process.
    model = load(args.model)
    unique = sorted({text for job in jobs for text in job}, key=len)
    probabilities = model.predict(np.array(unique, dtype=object), verbose=0)[:, 0]
    expected = dict(zip(unique, probabilities.tolist(), strict=True))
    explained = {}

    def predict(http, job):
        answer = http.post("/v1/predict", json={"texts": job})
        answer.raise_for_status()
        return answer.json()["predictions"]

    def explain_one(http, text):
        answer = http.post("/v1/explain", json={"text": text})
        answer.raise_for_status()
        return answer.json()

    def garbled_prediction(job, predictions) -> bool:
        if len(predictions) != len(job):
            return True
        for text, p in zip(job, predictions, strict=True):
            want = expected[text]
            if abs(p["probability"] - want) > PROBABILITY_ATOL:
                return True
            if p["label"] != label_of(want) and abs(want - 0.5) > PROBABILITY_ATOL:
                return True
        return False

    def garbled_explanation(text, answer) -> bool:
        want = explained[text]
        close = abs(answer["probability"] - want.probability) <= PROBABILITY_ATOL
        return not close or [t["token"] for t in answer["tokens"]] != want.tokens

    # Floor and server alternate, in --rounds parts of the requests, so that a
    # change in the machine's load falls on both.
    times = {key: [0.0, []] for key in ("floor", "server", "e_floor", "e_server")}
    answers, e_answers = [], []

    def timed(key, run):
        start = time.perf_counter()
        latencies, result = run()
        times[key][0] += time.perf_counter() - start
        times[key][1] += latencies
        return result

    def floor_run(signature, part):
        latencies = []
        for job in part:
            start = time.perf_counter()
            signature(texts=tf.constant(job))["probability"].numpy()
            latencies.append(time.perf_counter() - start)
        return latencies, None

    def explain_run(part):
        latencies = []
        for text in part:
            start = time.perf_counter()
            explained[text] = explain(model, text)
            latencies.append(time.perf_counter() - start)
        return latencies, None

    def server_run(clients, part, send):
        def run():
            _, latencies, result = drive(url, clients, part, send)
            return latencies, result

        return run

    with (
        tempfile.TemporaryDirectory() as folder,
        tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as log,
    ):
        signature = tf.saved_model.load(
            str(export(model, os.path.join(folder, "1")))
        ).signatures["serving_default"]
        signature(texts=tf.constant(jobs[0]))  # warm up
        explain(model, explain_jobs[0])
        server, url = start_server(args.model, log)
        try:
            import httpx2

            with httpx2.Client(base_url=url, timeout=120) as http:
                predict(http, jobs[0])  # warm up
                explain_one(http, explain_jobs[0])
            for k in range(args.rounds):
                part = jobs[k :: args.rounds]
                timed("floor", lambda part=part: floor_run(signature, part))
                run = server_run(args.clients, part, predict)
                answers += zip(part, timed("server", run), strict=True)
                part = explain_jobs[k :: args.rounds]
                timed("e_floor", lambda part=part: explain_run(part))
                run = server_run(args.explain_clients, part, explain_one)
                e_answers += zip(part, timed("e_server", run), strict=True)
        finally:
            server.terminate()
            server.wait(timeout=60)

    dropped = sum(isinstance(a, Exception) for _, a in answers)
    garbled = sum(
        not isinstance(a, Exception) and garbled_prediction(job, a)
        for job, a in answers
    )
    e_dropped = sum(isinstance(a, Exception) for _, a in e_answers)
    e_garbled = sum(
        not isinstance(a, Exception) and garbled_explanation(text, a)
        for text, a in e_answers
    )
    errors = (a for _, a in answers + e_answers if isinstance(a, Exception))
    first_error = next(errors, None)

    print()
    print("=== serve benchmark ===")
    print("command: " + shlex.join([sys.executable, *sys.argv]))
    print(
        f"machine: {cpu_name()}, {os.cpu_count()} cores, {platform.platform()}; "
        f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} "
        "at the end"
    )
    print(
        f"versions: python {platform.python_version()}, tensorflow {tf.__version__}, "
        f"keras {keras.__version__}, fastapi {version('fastapi')}, "
        f"uvicorn {version('uvicorn')}, httpx2 {version('httpx2')}"
    )
    texts = sum(map(len, jobs))
    print(
        f"model: {args.model} ({model.count_params():,} parameters); "
        f"{len(jobs)} predict requests of 1-16 test reviews ({texts} texts), "
        f"{len(explain_jobs)} explain requests; seed {args.seed}"
    )
    print(
        f"{'':<28} {'clients':>7} {'requests':>8} {'req/s':>8} {'texts/s':>8} "
        f"{'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}"
    )
    for key, name, clients, sent in (
        ("floor", "SavedModel in-process", 1, jobs),
        ("server", "POST /v1/predict", args.clients, jobs),
        ("e_floor", "explain() in-process", 1, explain_jobs),
        ("e_server", "POST /v1/explain", args.explain_clients, explain_jobs),
    ):
        print(report(name, clients, *times[key], sent))
    print(
        f"checked: predict {len(jobs) - dropped - garbled}/{len(jobs)} correct "
        f"({dropped} dropped, {garbled} garbled); explain "
        f"{len(explain_jobs) - e_dropped - e_garbled}/{len(explain_jobs)} correct "
        f"({e_dropped} dropped, {e_garbled} garbled)"
    )
    if first_error is not None:
        print(f"first error: {type(first_error).__name__}: {first_error}")
    return 1 if dropped or garbled or e_dropped or e_garbled else 0


if __name__ == "__main__":
    sys.exit(main())
