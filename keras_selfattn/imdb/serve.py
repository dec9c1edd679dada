"""An HTTP server for the IMDB model: a JSON API and a page that shows what it read.

`keras-selfattn serve MODEL` loads the model once and serves, with FastAPI on
uvicorn (`pip install ".[serve]"`):

- `POST /v1/predict`: `{"texts": [...]}` (1 to 64 strings) in;
  `{"predictions": [{"label": "positive", "probability": 0.93}, ...]}` out.
- `POST /v1/explain`: `{"text": "..."}` in; the label, the probability and the
  review's tokens as the model read them, each with its attribution, its
  pooling weight and its signed pooling share of the attention branch's
  logit (`imdb/explain.py`); the attributions' `baseline` and `rest`, the
  n-gram branch's share and the classifier's bias.
- `GET /healthz`: `{"status": "ok"}`.
- `GET /`: the page (`static/index.html`: plain JavaScript, nothing fetched
  from elsewhere).

TensorFlow runs in one worker thread, so requests never block the event
loop. Predictions that arrive while the model is busy wait in a queue and go
to the model together, as one batch (at most `MAX_BATCH` texts), sorted by
length and cut into calls of `CALL_SIZE` texts (each call pads to its own
longest text); explanations take their turn in the same thread. Bad input
gets a 4xx answer whose JSON body is `{"detail": "<one line>"}`, and the
server carries on. A body is cut off at `MAX_BODY` bytes as it is read,
whatever its `Content-Length` says; the limits hold together, so `MAX_TEXTS`
texts of `MAX_CHARS` characters each are more than one body may hold.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import importlib.resources
import socket
from pathlib import Path
from typing import Annotated

import keras
import numpy as np
import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    StringConstraints,
    ValidationError,
)
from starlette.exceptions import HTTPException

from keras_selfattn.imdb import model as imdb_model
from keras_selfattn.imdb._errors import first_line
from keras_selfattn.imdb.explain import explain
from keras_selfattn.imdb.export import serving_model
from keras_selfattn.imdb.model import label_of

__all__ = [
    "CALL_SIZE",
    "MAX_BATCH",
    "MAX_BODY",
    "MAX_CHARS",
    "MAX_TEXTS",
    "Predictor",
    "ServeError",
    "create_app",
    "serve",
]

MAX_TEXTS = 64  # texts per /v1/predict request
MAX_CHARS = 20_000  # characters per text
MAX_BODY = 1_000_000  # bytes per request body
MAX_BATCH = 256  # texts per batch, when waiting requests are batched
CALL_SIZE = 32  # texts per model call: a batch is cut by length into such calls
PAGE = ("static", "index.html")
NO_TOKENS = "no words the model reads (only characters it drops)"


class ServeError(Exception):
    """The server cannot start (the address is taken...); one line for users."""


# ---------------------------------------------------------------- the model


class Predictor:
    """The model behind the server: one TensorFlow thread, batched predictions.

    Args:
        model: The demo model (raw strings in), e.g. from
            `keras_selfattn.imdb.model.load`.
        max_batch: The most texts of waiting requests merged into one
            batch (a request is never split, so one larger request is a
            batch of its own); each batch goes to the model in calls of
            `CALL_SIZE` texts. Defaults to `MAX_BATCH`.
    """

    def __init__(self, model, max_batch: int = MAX_BATCH):
        import tensorflow as tf

        self.model = model
        self.max_batch = max_batch
        self.bias = float(np.asarray(model.get_layer(imdb_model.CLASSIFIER).bias)[0])
        wrapped = serving_model(model)
        self._serve = tf.function(
            lambda texts: wrapped(texts, training=False),
            input_signature=[tf.TensorSpec([None], tf.string)],
        )
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._waiting: collections.deque = collections.deque()
        self._batcher: asyncio.Task | None = None
        self.predict_now(["warm up"])  # traces the graph before the first request

    def predict_now(self, texts: list[str]) -> tuple[np.ndarray, list[str]]:
        """Probabilities and labels of `texts`, computed in the calling thread.

        A text with no token (nothing but symbols that the standardization
        drops) gets the probability NaN and the label `""`: the model has
        nothing to read there (`imdb.model.readable`).
        """
        import tensorflow as tf

        readable = np.flatnonzero(imdb_model.readable(texts, self.model))
        probabilities = np.full(len(texts), np.nan, dtype="float32")
        labels = [""] * len(texts)
        # Texts of similar length go together: each call pads to its longest.
        readable = sorted(readable, key=lambda i: len(texts[i]))
        for start in range(0, len(readable), CALL_SIZE):
            chunk = readable[start : start + CALL_SIZE]
            out = self._serve(tf.constant([texts[i] for i in chunk]))
            probabilities[chunk] = out["probability"].numpy()
            for i, label in zip(chunk, out["label"].numpy(), strict=True):
                labels[i] = label.decode()
        return probabilities, labels

    async def predict(self, texts: list[str]) -> tuple[np.ndarray, list[str]]:
        """Probabilities and labels of `texts`, batched with other waiting calls."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiting.append((texts, future))
        batcher = self._batcher
        if batcher is None or batcher.done() or batcher.get_loop() is not loop:
            self._batcher = loop.create_task(self._run_batches())
        return await future

    async def _run_batches(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiting:
            batch, size = [], 0
            while self._waiting and (
                not batch or size + len(self._waiting[0][0]) <= self.max_batch
            ):
                texts, future = self._waiting.popleft()
                batch.append((texts, future))
                size += len(texts)
            texts = [text for request, _ in batch for text in request]
            try:
                probabilities, labels = await loop.run_in_executor(
                    self._thread(), self.predict_now, texts
                )
            except Exception as error:  # handed to each request of the batch
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            start = 0
            for request, future in batch:
                end = start + len(request)
                if not future.done():  # its client may have gone
                    future.set_result((probabilities[start:end], labels[start:end]))
                start = end

    async def explain(self, text: str):
        """`imdb.explain.explain(model, text)`, run in the TensorFlow thread.

        Returns None for a text with no token (see `predict_now`).
        """

        def run():
            readable = imdb_model.readable([text], self.model)[0]
            return explain(self.model, text) if readable else None

        return await asyncio.get_running_loop().run_in_executor(self._thread(), run)

    def _thread(self) -> concurrent.futures.ThreadPoolExecutor:
        """The one thread that runs TensorFlow, started on first use."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="tensorflow"
            )
        return self._pool

    def close(self) -> None:
        """Stops the TensorFlow thread after the calls it has started; a
        later call starts a new one (the app can be started again)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


# ------------------------------------------------------------ the messages


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("empty text: give a non-empty review")
    return text


Text = Annotated[
    StrictStr, StringConstraints(max_length=MAX_CHARS), AfterValidator(_not_blank)
]


class PredictRequest(BaseModel):
    """The body of `POST /v1/predict`."""

    model_config = ConfigDict(extra="forbid")
    texts: Annotated[list[Text], Field(min_length=1, max_length=MAX_TEXTS)]


class Prediction(BaseModel):
    """The model's answer for one text."""

    label: str
    probability: float


class PredictResponse(BaseModel):
    """The answer of `POST /v1/predict`, one prediction per text, in order."""

    predictions: list[Prediction]


class ExplainRequest(BaseModel):
    """The body of `POST /v1/explain`."""

    model_config = ConfigDict(extra="forbid")
    text: Text


class Token(BaseModel):
    """One token as the model read it."""

    token: str
    attribution: float  # how much it moved the logit (> 0: towards positive)
    weight: float  # its pooling weight (the weights of a review sum to 1)
    share: float  # its signed pooling share of the attention branch's logit


class ExplainResponse(BaseModel):
    """The answer of `POST /v1/explain`."""

    label: str
    probability: float
    tokens: list[Token]
    bias: float  # the classifier's bias: logit = shares + ngram_share + bias
    baseline: float  # logit = attributions + baseline + rest (integrated gradients)
    rest: float  # the n-gram branch's share of the words the clip skipped
    ngram_share: float  # the n-gram branch's term of the logit (0: none)
    gap_after: int | None  # words skipped after this token (-1: before the first)


# -------------------------------------------------------------- the server


class _BodyLimit:
    """ASGI middleware: a 413 answer for a body over `limit` bytes.

    It counts the bytes as they arrive (a missing or false `Content-Length`
    changes nothing) and hands the application the body it has read.
    """

    def __init__(self, app, limit: int = MAX_BODY):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        # Compared as digits: int() refuses more than 4,300 of them.
        digits = declared.lstrip(b"0") if declared.isdigit() else b""
        too_large = len(digits) > len(str(self.limit)) or (
            bool(digits) and int(digits) > self.limit
        )
        chunks, size, more = [], 0, not too_large
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            too_large = size > self.limit
            more = message.get("more_body", False) and not too_large
        if too_large:
            message = f"request body over {self.limit} bytes"
            response = JSONResponse({"detail": message}, status_code=413)
            return await response(scope, receive, send)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _one_line(error: ValidationError) -> tuple[int, str]:
    """The status and a one-line message for a body that is not a valid request."""
    errors = error.errors()
    first = errors[0]
    if first["type"] == "json_invalid":
        return 400, f"body is not JSON: {first['msg']}"
    # A client's key, shown escaped and cut: one line, whatever it holds.
    where = ".".join(
        str(part).encode("unicode_escape").decode("ascii")[:60] for part in first["loc"]
    )
    where = where or "body"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return 422, f"{where}: {first['msg']}{more}"


def _json_body(message: type[BaseModel]):
    """A dependency that reads the body as `message`, whatever its content type.

    (FastAPI would read only an `application/json` body as JSON; `curl -d`
    sends another type.)
    """

    async def parse(request: Request) -> BaseModel:
        try:
            return message.model_validate_json(await request.body())
        except ValidationError as error:
            raise HTTPException(*_one_line(error)) from None

    return parse


def _documented(message: type[BaseModel]) -> dict:
    """The OpenAPI entry of a JSON body read by `_json_body(message)`."""
    schema = message.model_json_schema()
    content = {"application/json": {"schema": schema}}
    return {"requestBody": {"content": content, "required": True}}


def create_app(model: keras.Model) -> FastAPI:
    """The FastAPI application serving `model`.

    Args:
        model: The demo model (raw strings in), loaded once by the caller.

    Returns:
        A `fastapi.FastAPI` application; run it with uvicorn, or test it with
        `fastapi.testclient.TestClient`.

    Example:

    Asked in the process, with Starlette's test client (it needs the
    `httpx2` package):

    >>> from keras_selfattn.imdb.model import build_model
    >>> model = build_model(["a great film", "a dull film"], vocab_size=100,
    ...                     bigram_vocab_size=0, max_len=16)
    >>> from fastapi.testclient import TestClient
    >>> from keras_selfattn.imdb.serve import create_app
    >>> with TestClient(create_app(model)) as client:
    ...     answer = client.post("/v1/predict", json={"texts": ["A great film!"]})
    >>> first = answer.json()["predictions"].pop(0)
    >>> answer.status_code, sorted(first)
    (200, ['label', 'probability'])
    """
    predictor = Predictor(model)
    page = (
        importlib.resources.files("keras_selfattn.imdb")
        .joinpath(*PAGE)
        .read_text(encoding="utf-8")
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        predictor.close()

    app = FastAPI(
        title="keras-selfattn IMDB sentiment",
        docs_url=None,  # the docs pages load scripts from a CDN
        redoc_url=None,
        lifespan=lifespan,
    )
    app.add_middleware(_BodyLimit, limit=MAX_BODY)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        message = error.detail
        if error.status_code in (404, 405):  # Starlette's: say what was asked
            message = f"{message}: {request.method} {request.url.path}"
        return JSONResponse(
            {"detail": message}, status_code=error.status_code, headers=error.headers
        )

    @app.exception_handler(Exception)
    async def server_error(request: Request, error: Exception):
        message = f"server error: {first_line(error, typed=True)}"
        return JSONResponse({"detail": message}, status_code=500)

    # HEAD too (answered as GET, without the body): health checkers and
    # `curl -I` ask with it, and FastAPI's `get` alone answers 405.
    @app.api_route(
        "/",
        methods=["GET", "HEAD"],
        response_class=HTMLResponse,
        include_in_schema=False,
    )
    async def index() -> str:
        return page

    @app.api_route("/healthz", methods=["GET", "HEAD"])
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.post("/v1/predict", openapi_extra=_documented(PredictRequest))
    async def predict(
        request: Annotated[PredictRequest, Depends(_json_body(PredictRequest))],
    ) -> PredictResponse:
        probabilities, labels = await predictor.predict(request.texts)
        unread = np.flatnonzero(np.isnan(probabilities))
        if len(unread):
            raise HTTPException(422, f"texts.{unread[0]}: {NO_TOKENS}")
        return PredictResponse(
            predictions=[
                Prediction(label=label, probability=float(p))
                for p, label in zip(probabilities, labels, strict=True)
            ]
        )

    @app.post("/v1/explain", openapi_extra=_documented(ExplainRequest))
    async def explain_text(
        request: Annotated[ExplainRequest, Depends(_json_body(ExplainRequest))],
    ) -> ExplainResponse:
        result = await predictor.explain(request.text)
        if result is None:
            raise HTTPException(422, f"text: {NO_TOKENS}")
        return ExplainResponse(
            label=label_of(result.probability),
            probability=result.probability,
            tokens=[
                Token(
                    token=token,
                    attribution=float(attribution),
                    weight=float(weight),
                    share=float(share),
                )
                for token, attribution, weight, share in zip(
                    result.tokens,
                    result.attributions,
                    result.weights,
                    result.contributions,
                    strict=True,
                )
            ],
            bias=predictor.bias,
            baseline=float(result.baseline),
            rest=float(result.rest),
            ngram_share=float(result.ngram_share),
            gap_after=result.gap_after,
        )

    app.state.predictor = predictor
    return app


def _address(host: str, port: int) -> str:
    """`host:port` as a URL writes it: an IPv6 host in brackets (`[::1]:8000`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port` and listening, or a `ServeError`."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as error:
        raise ServeError(f"cannot listen on {_address(host, port)}: {error}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise ServeError(
            f"cannot listen on {_address(host, port)}: {error.strerror}"
        ) from None
    return sock


def serve(model_path: str | Path, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Loads the model, then serves it over HTTP until interrupted.

    The model is loaded (and its graph traced) before the port is bound, so a
    missing or corrupt file stops it with nothing bound.

    Args:
        model_path: The `.keras` file of the demo model.
        host: The address to listen on. Defaults to `"127.0.0.1"` (this
            machine only); `"0.0.0.0"` listens on every network interface.
        port: The TCP port; `0` picks a free one. Defaults to `8000`.

    Raises:
        keras_selfattn.imdb.model.ModelFileError: The model file is missing
            or not a model.
        ServeError: The address cannot be listened on.
    """
    app = create_app(imdb_model.load(model_path))
    sock = _listen(host, port)
    bound = sock.getsockname()[1]
    url = f"http://{_address(host, bound)}/"
    print(f"serving {model_path} on {url} (Ctrl+C stops)", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
