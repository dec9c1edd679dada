"""`keras-selfattn serve`: the JSON API, its answers to bad input, and start-up."""

from __future__ import annotations

import asyncio
import configparser
import errno
import fnmatch
import json
import os
import re
import socket
from pathlib import Path

import httpx2
import numpy as np
import pytest
from fastapi.testclient import TestClient

from keras_selfattn.imdb import cli, serve
from keras_selfattn.imdb import model as imdb_model
from keras_selfattn.imdb.explain import explain
from keras_selfattn.imdb.model import label_of
from tests.helpers import DEMO_V0_1, needs_demo_v0_1, to_numpy
from tests.imdb.serving import (
    NEGATIVE,
    POSITIVE,
    running_server,
)

pytestmark = pytest.mark.tensorflow_only

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [POSITIVE, NEGATIVE, "great", "boring boring boring!", "zebra", "Loved it"]


@pytest.fixture(scope="module")
def model(tiny_model):
    return imdb_model.load(tiny_model)


@pytest.fixture(scope="module")
def client(model):
    with TestClient(serve.create_app(model)) as client:
        yield client


def _expected(model, texts):
    return model.predict(np.array(texts, dtype=object), verbose=0)[:, 0]


def test_healthz_and_page(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    for path in ("/healthz", "/"):  # health checkers ask with HEAD (was 405)
        head = client.head(path)
        assert head.status_code == 200 and head.content == b"", path
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<textarea id="review"' in page.text
    # Nothing fetched from elsewhere: no CDN script, style or font.
    assert "http://" not in page.text and "https://" not in page.text


def test_predict_matches_the_model_in_process(client, model):
    answer = client.post("/v1/predict", json={"texts": TEXTS})
    assert answer.status_code == 200, answer.text
    predictions = answer.json()["predictions"]
    expected = _expected(model, TEXTS)
    got = [p["probability"] for p in predictions]
    # Batched with others, a text is padded differently: float noise only.
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert [p["label"] for p in predictions] == [label_of(p) for p in expected]
    assert [p["label"] for p in predictions[:2]] == ["positive", "negative"]


def test_the_app_serves_again_after_a_shutdown(model):
    # Its shutdown closed the TensorFlow thread for good: 500 the second time.
    app = serve.create_app(model)
    for _ in range(2):
        with TestClient(app) as again:
            answer = again.post("/v1/predict", json={"texts": ["great"]})
            assert answer.status_code == 200, answer.text
            assert again.post("/v1/explain", json={"text": "great"}).status_code == 200


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(
    client, model, monkeypatch
):
    predictor = client.app.state.predictor
    calls = []
    predict_now = predictor.predict_now

    def counted(texts):
        calls.append(len(texts))
        return predict_now(texts)

    monkeypatch.setattr(predictor, "predict_now", counted)
    rng = np.random.default_rng(0)
    requests = [
        [TEXTS[i] for i in rng.integers(0, len(TEXTS), rng.integers(1, 9))]
        for _ in range(24)
    ]

    async def send_all():
        transport = httpx2.ASGITransport(app=client.app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://t") as c:
            return await asyncio.gather(
                *(c.post("/v1/predict", json={"texts": r}) for r in requests)
            )

    answers = asyncio.run(send_all())
    expected = dict(zip(TEXTS, _expected(model, TEXTS), strict=True))
    for texts, answer in zip(requests, answers, strict=True):
        assert answer.status_code == 200, answer.text
        got = [p["probability"] for p in answer.json()["predictions"]]
        np.testing.assert_allclose(got, [expected[t] for t in texts], atol=1e-5)
    assert sum(calls) == sum(map(len, requests))
    assert len(calls) < len(requests)  # requests that waited went together


def test_explain_matches_explain_in_process(client, model):
    answer = client.post("/v1/explain", json={"text": POSITIVE})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = explain(model, POSITIVE)
    assert [t["token"] for t in body["tokens"]] == expected.tokens
    assert expected.tokens[:4] == ["the", "film", "was", "great"]
    weights = [t["weight"] for t in body["tokens"]]
    shares = [t["share"] for t in body["tokens"]]
    np.testing.assert_allclose(weights, expected.weights, atol=1e-6)
    np.testing.assert_allclose(shares, expected.contributions, atol=1e-6)
    np.testing.assert_allclose(body["probability"], _expected(model, [POSITIVE]))
    assert body["label"] == "positive" and body["gap_after"] is None
    bias = to_numpy(model.get_layer(imdb_model.CLASSIFIER).bias)[0]
    # With the shares, which test_explain.py checks add up to the logit.
    np.testing.assert_allclose(body["bias"], bias)
    attributions = [t["attribution"] for t in body["tokens"]]
    np.testing.assert_allclose(attributions, expected.attributions, atol=1e-5)
    for name in ("baseline", "rest", "ngram_share"):
        assert body[name] == pytest.approx(getattr(expected, name), abs=1e-5), name


TOO_LONG = "a" * (serve.MAX_CHARS + 1)
TOO_MANY = ["great"] * (serve.MAX_TEXTS + 1)


@pytest.mark.parametrize(
    "route, body, status, message",
    [
        ("predict", b"not json", 400, "body is not JSON"),
        ("predict", b"", 400, "body is not JSON"),
        ("predict", b"[1, 2]", 422, "body: Input should be an object"),
        ("predict", {}, 422, "texts: Field required"),
        ("predict", {"texts": []}, 422, "texts: List should have at least 1 item"),
        ("predict", {"texts": "great"}, 422, "texts: Input should be a valid array"),
        ("predict", {"texts": ["great", 3]}, 422, "texts.1: Input should be a valid"),
        ("predict", {"texts": [None]}, 422, "texts.0: Input should be a valid string"),
        ("predict", {"texts": TOO_MANY}, 422, "texts: List should have at most 64"),
        ("predict", {"texts": ["a", TOO_LONG]}, 422, "texts.1: String should have at"),
        ("predict", {"texts": ["great", "  "]}, 422, "texts.1: Value error, empty"),
        ("predict", {"texts": ["great", "$$$"]}, 422, "texts.1: no words the model"),
        ("predict", {"texts": ["a"], "extra": 1}, 422, "extra: Extra inputs are not"),
        ("predict", b'{"texts": ["a"], "a\\nb": 1}', 422, "a\\nb: Extra inputs are"),
        ("predict", {"texts": ["a"], "k" * 500: 1}, 422, "k" * 60 + ": Extra inputs"),
        ("explain", {"texts": ["great"]}, 422, "text: Field required"),
        ("explain", {"text": 3}, 422, "text: Input should be a valid string"),
        ("explain", {"text": ""}, 422, "text: Value error, empty text"),
        ("explain", {"text": TOO_LONG}, 422, "text: String should have at most 20000"),
        ("explain", {"text": "#@$"}, 422, "text: no words the model reads"),
    ],
)  # fmt: skip
def test_bad_input_is_a_one_line_4xx_and_the_server_carries_on(
    client, route, body, status, message
):
    if isinstance(body, bytes):
        answer = client.post(f"/v1/{route}", content=body)
    else:
        answer = client.post(f"/v1/{route}", json=body)
    assert answer.status_code == status, answer.text
    detail = answer.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    assert detail.startswith(message), detail
    assert client.post("/v1/predict", json={"texts": ["great"]}).status_code == 200


@needs_demo_v0_1
def test_the_server_asks_its_own_models_standardization():
    # Accented letters alone: words for a model built today, none for 0.1's.
    predictor = serve.Predictor(imdb_model.load(DEMO_V0_1))
    try:
        probabilities, labels = predictor.predict_now(["\u00c9 \u00e9", "great"])
        assert np.isnan(probabilities[0]) and labels[0] == ""
        assert 0 < probabilities[1] < 1 and labels[1] in ("positive", "negative")
        assert asyncio.run(predictor.explain("\u00c9 \u00e9")) is None
    finally:
        predictor.close()


def test_json_is_read_whatever_the_content_type(client):
    # curl -d sends application/x-www-form-urlencoded.
    headers = {"content-type": "application/x-www-form-urlencoded"}
    body = json.dumps({"texts": ["great"]})
    answer = client.post("/v1/predict", content=body, headers=headers)
    assert answer.status_code == 200, answer.text


def _big_body() -> bytes:
    return json.dumps({"texts": ["great " * 3000] * 60}).encode()  # 1.08 MB


@pytest.mark.parametrize(
    "how", ["content-length", "chunked", "false-length", "5000-digit-length"]
)
def test_a_body_over_1_mb_is_413_whatever_content_length_says(client, how):
    body = _big_body()
    assert len(body) > serve.MAX_BODY
    if how == "chunked":  # no Content-Length at all
        answer = client.post(
            "/v1/predict", content=iter([body[:500_000], body[500_000:]])
        )
    elif how == "false-length":
        answer = client.post(
            "/v1/predict", content=body, headers={"content-length": "100"}
        )
    elif how == "5000-digit-length":  # past what int() reads: a 500 before
        answer = client.post(
            "/v1/predict", content=body, headers={"content-length": "9" * 5000}
        )
    else:
        answer = client.post("/v1/predict", content=body)
    assert answer.status_code == 413
    assert answer.json() == {"detail": "request body over 1000000 bytes"}
    assert client.get("/healthz").status_code == 200


def test_unknown_route_and_wrong_method(client):
    answer = client.get("/v1/nothing")
    assert answer.status_code == 404
    assert answer.json() == {"detail": "Not Found: GET /v1/nothing"}
    answer = client.get("/v1/predict")
    assert answer.status_code == 405
    assert answer.json() == {"detail": "Method Not Allowed: GET /v1/predict"}


def test_a_server_error_is_a_one_line_500(client, monkeypatch):
    def fails(texts):
        raise RuntimeError("the model broke\nsecond line")

    monkeypatch.setattr(client.app.state.predictor, "predict_now", fails)
    # As uvicorn does: answer, then log the exception (here: not re-raised).
    quiet = TestClient(client.app, raise_server_exceptions=False)
    answer = quiet.post("/v1/predict", json={"texts": ["great"]})
    assert answer.status_code == 500
    assert answer.json() == {"detail": "server error: RuntimeError: the model broke"}


def test_the_page_is_package_data():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    patterns = config["options.package_data"]["keras_selfattn.imdb"].split()
    assert any(fnmatch.fnmatch("/".join(serve.PAGE), p) for p in patterns)
    extras = config["options.extras_require"]
    for package in ("fastapi", "uvicorn"):
        assert package in extras["serve"].split()
    # The test extra brings the serve extra (setup.cfg's lean layout).
    (itself,) = [r for r in extras["test"].split() if r.startswith("keras-selfattn[")]
    assert "serve" in itself[len("keras-selfattn[") : -1].split(",")


def test_the_page_examples_are_held_out_reviews():
    from keras_selfattn.imdb.data import load_bundled

    page = Path(serve.__file__).with_name("static").joinpath("index.html").read_text()
    start = page.index('<script type="application/json" id="examples">')
    block = page[page.index(">", start) + 1 : page.index("</script>", start)]
    examples = json.loads(block)
    data = load_bundled()
    test = dict(zip(data.test_texts, data.test_labels, strict=True))
    train = set(data.train_texts)
    assert len(examples) == 3
    for example in examples:
        assert test[example["text"]] == example["label"]
        assert example["text"] not in train
        assert len(example["text"]) < 600


def test_real_server_answers_and_survives_bad_requests(
    tiny_model, subprocess_env, tmp_path
):
    log = tmp_path / "serve.log"
    with (
        running_server(tiny_model, subprocess_env, log) as url,
        httpx2.Client(base_url=url, timeout=30) as http,
    ):
        assert http.post("/v1/predict", content=b"{nope").status_code == 400
        # A streamed body with no Content-Length, over the limit.
        big = _big_body()
        chunks = (big[i : i + 65536] for i in range(0, len(big), 65536))
        assert http.post("/v1/predict", content=chunks).status_code == 413
        assert http.get("/missing").status_code == 404
        answer = http.post("/v1/predict", json={"texts": [POSITIVE, NEGATIVE]})
        assert answer.status_code == 200, answer.text
        labels = [p["label"] for p in answer.json()["predictions"]]
        assert labels == ["positive", "negative"]
        assert (
            http.post("/v1/explain", json={"text": NEGATIVE}).json()["label"]
            == "negative"
        )
    log = (tmp_path / "serve.log").read_text()
    assert f"on {url}/" in log  # 127.0.0.1 unless told otherwise


@pytest.mark.parametrize("case", ["missing", "corrupt"])
def test_a_model_that_does_not_load_stops_serve_before_anything_is_bound(
    tmp_path, monkeypatch, capsys, case
):
    path = tmp_path / f"{case}.keras"
    if case == "corrupt":
        path.write_bytes(b"PK\x03\x04 this is not a model")
    # Every bind of this process is recorded (and refused), whoever asks.
    binds = []

    def bind(sock, address):
        binds.append(address)
        raise OSError("bind called")

    monkeypatch.setattr(socket.socket, "bind", bind)
    listened = []
    monkeypatch.setattr(serve, "_listen", lambda *args: listened.append(args))
    assert cli.main(["serve", str(path), "--port", "8123"]) == 2
    assert binds == [] and listened == []
    (line,) = capsys.readouterr().err.splitlines()
    if case == "missing":
        assert line == f"keras-selfattn: error: model file not found: {path}"
    else:
        assert re.fullmatch(
            rf"keras-selfattn: error: cannot load model {re.escape(str(path))}: \S.*",
            line,
        ), line


def test_a_port_in_use_is_one_line(tiny_model, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["serve", str(tiny_model), "--port", str(port)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    expected = f"keras-selfattn: error: cannot listen on 127.0.0.1:{port}: "
    assert line == expected + os.strerror(errno.EADDRINUSE), line


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_bad_port_is_one_line(port, capsys):
    assert cli.main(["serve", "m.keras", "--port", port]) == 2
    assert "port" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("127.0.0.1", 8000, "127.0.0.1:8000"),
        ("localhost", 0, "localhost:0"),
        ("::1", 8000, "[::1]:8000"),
    ],
    ids=["ipv4", "name", "ipv6"],
)
def test_the_printed_address_is_one_a_url_can_hold(host, port, expected):
    assert serve._address(host, port) == expected
