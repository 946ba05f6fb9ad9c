"""A stand-in for Kubeflow Trainer's TrainJob status endpoint (v2.3.0 `pkg/statusserver`), for tests.

It does what the upstream server does with a request, and checks it the way the API server
behind it would:
- HTTPS with a certificate signed by its own CA (made with the openssl CLI), so the client must
  verify the server through `KUBEFLOW_TRAINER_SERVER_CA_CERT` as in a pod;
- only `POST <status_path(namespace, name)>`; `Authorization: Bearer <token>` must carry the token
  written to the token file (upstream verifies the projected token's audience; here the token is
  a secret the test chose, so a client that does not send the file's content is refused with 403);
- the body is decoded as `UpdateTrainJobStatusRequest` and validated against the `trainerStatus`
  schema of the v2.3.0 TrainJob CRD fixture, with unknown fields refused (as a structural schema
  prunes them) and its CEL rule (lastUpdatedTime required); an invalid body gets 422 and a
  `metav1.Status`, as upstream answers.
Every request is recorded (`requests`), valid or not.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from ftbench.contracts import env as E
from ftbench.contracts.trainer_status import status_path
from ftbench_trainer.predict.answer import send_json
from tests.unit.render_cases import trainer_v2_dir

NAMESPACE, NAME = "team-a", "tiny-trainjob"
TOKEN = "stand-in-projected-token"


def trainer_status_schema() -> dict[str, Any]:
    """`status.trainerStatus` of the v2.3.0 TrainJob CRD (shared fixture), unknown fields refused."""
    path = trainer_v2_dir() / "trainer.kubeflow.org_trainjobs.yaml"
    if not path.exists():
        pytest.skip(f"TrainJob CRD fixture not found at {path} (set FTBENCH_SHARED_DIR)")
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["trainerStatus"]
    return _closed(schema)


def _closed(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items() if k != "x-kubernetes-validations"}
        if "properties" in out:
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def request_errors(body: Any) -> list[str]:
    """Why the API server would refuse this request body ([] when it would accept it)."""
    import jsonschema

    schema = {
        "type": "object",
        "properties": {"trainerStatus": trainer_status_schema()},
        "additionalProperties": False,
    }
    errors = [
        f"{'/'.join(map(str, e.path))}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(body)
    ]
    status = body.get("trainerStatus") if isinstance(body, dict) else None
    if isinstance(status, dict) and "lastUpdatedTime" not in status:
        errors.append("trainerStatus: lastUpdatedTime is required when trainerStatus is present")
    return errors


@dataclass
class Received:
    method: str
    path: str
    authorization: str
    content_type: str
    body: Any
    errors: list[str]
    answer: int


@dataclass
class StandInEndpoint:
    url: str
    ca_file: Path
    token_file: Path
    requests: list[Received] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """What Trainer's TrainJobStatus plugin injects into the trainer container."""
        return {
            E.KUBEFLOW_TRAINER_SERVER_URL: self.url,
            E.KUBEFLOW_TRAINER_SERVER_CA_CERT: str(self.ca_file),
            E.KUBEFLOW_TRAINER_SERVER_TOKEN: str(self.token_file),
        }


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca.crt, server.crt, server.key)."""
    if subprocess.run(["openssl", "version"], capture_output=True, check=False).returncode != 0:
        pytest.skip("the openssl CLI is needed to make the stand-in endpoint's certificates")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, capture_output=True, check=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
            "-subj", "/CN=stand-in-trainer-ca", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1")  # fmt: skip
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n"
    )
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "1", "-extfile", "server.ext")  # fmt: skip
    return directory / "ca.crt", directory / "server.crt", directory / "server.key"


@contextmanager
def stand_in_endpoint(directory: Path) -> Iterator[StandInEndpoint]:
    """The endpoint, serving on a free port of 127.0.0.1 until the block ends."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, cert, key = _certificates(directory)
    token_file = directory / "token"
    token_file.write_text(TOKEN + "\n")
    path = status_path(NAMESPACE, NAME)
    received: list[Received] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body: Any = json.loads(raw)
                errors = request_errors(body)
            except ValueError as err:
                body, errors = raw.decode(errors="replace"), [f"not JSON: {err}"]
            auth = self.headers.get("Authorization", "")
            if self.path != path:
                code, errors = 404, [*errors, f"no endpoint at {self.path}"]
            elif auth.split() != ["Bearer", TOKEN]:
                code = 403
            else:
                code = 422 if errors else 200
            received.append(Received("POST", self.path, auth, self.headers.get("Content-Type", ""), body, errors, code))
            answer = body if code == 200 else {"kind": "Status", "status": "Failure", "message": "; ".join(errors) or "Forbidden", "code": code}  # fmt: skip
            send_json(self, code, answer)

        def log_message(self, *args: Any) -> None:  # quiet test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = StandInEndpoint(f"https://127.0.0.1:{server.server_address[1]}{path}", ca, token_file)
        endpoint.requests = received
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
