"""The predictor service: `python -m ftbench_trainer.predict.serve [--port N]`.

The operator's image has no torch, so it cannot trace a step; this service runs in the trainer
image (the chart's `predictor` Deployment, with the models volume mounted read-only so it can
read config.json files) and answers `POST /v1/predict` with a launch plan as the body. One
prediction runs at a time (each uses a CPU core and up to a few hundred MB); answers are cached by
the plan's content, so a sweep's repeated points and an operator restart cost nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import threading
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.prediction import HEALTH_PATH, PREDICT_PATH, PREDICTOR_PORT, MemoryPrediction
from ftbench_trainer.predict.answer import send_json
from ftbench_trainer.predict.model import PredictionError, predict

log = logging.getLogger("ftbench_trainer.predict.serve")
MAX_BODY_BYTES = 1 << 20
FAILED = "ftbench failed"  # the start of a 500's error: a defect to report, not a plan it cannot predict
CACHE_SIZE = 512


def cache_key(plan: LaunchPlan) -> str:
    """What decides the prediction: the plan without who asked and where outputs go."""
    fields = plan.model_dump(mode="json", exclude={"experiment_ref", "output", "notes"})
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class Predictor:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, MemoryPrediction] = OrderedDict()

    def __call__(self, plan: LaunchPlan) -> MemoryPrediction:
        key = cache_key(plan)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            prediction = predict(plan)
            self._cache[key] = prediction
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
            return prediction


def handler_for(predictor: Predictor) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._send(200, {"ok": True}) if self.path == HEALTH_PATH else self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            if self.path != PREDICT_PATH:
                self._send(404, {"error": f"POST {PREDICT_PATH} with a launch plan"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY_BYTES:
                self._send(413 if length else 400, {"error": f"a launch plan of 1 to {MAX_BODY_BYTES} bytes"})
                return
            try:
                plan = LaunchPlan.from_json(self.rfile.read(length).decode())
            except ValueError as exc:
                self._send(400, {"error": f"not a launch plan: {exc}"})
                return
            try:
                prediction = predictor(plan)
            except PredictionError as exc:  # a plan it cannot predict by design (no config, an untraceable model)
                self._send(422, {"error": str(exc)})
                return
            except Exception as exc:  # a defect of ftbench's: its traceback in the log, 500, and keep serving
                log.exception("predicting %s failed", plan.model.name)
                first = str(exc).splitlines()[0] if str(exc) else ""
                self._send(
                    500, {"error": f"{FAILED}: {type(exc).__name__}: {first} (the predictor's log has the traceback)"}
                )
                return
            self._send(200, prediction.model_dump(mode="json", by_alias=True))

        def _send(self, code: int, body: dict) -> None:
            send_json(self, code, body)

        def log_message(self, format: str, *args: object) -> None:
            print(f"predictor: {self.address_string()} {format % args}", file=sys.stderr)

    return Handler


def serve(host: str, port: int) -> ThreadingHTTPServer:
    return ThreadingHTTPServer((host, port), handler_for(Predictor()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftbench_trainer.predict.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=PREDICTOR_PORT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="predictor: %(levelname)s %(name)s: %(message)s")
    server = serve(args.host, args.port)
    print(f"predictor: serving {PREDICT_PATH} on {args.host}:{server.server_address[1]}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
