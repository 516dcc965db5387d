"""What the summary header says when a server that is not SGLang serves no /metrics."""

from __future__ import annotations

import http.server
import json

from perfgate.plugin._hooks import _header
from perfgate.profile import parse_profile
from perfgate.session import Session, SessionOptions
from tests.support import loopback_http

PROFILE = """
name = "other-engine"
[server]
kind = "attach"
base_url = "{url}"
ready_path = "/health"
startup_timeout_s = 10
[telemetry]
source = "none"
[[workload]]
num_prompts = 1
concurrency = 1
input_len = 4
output_len = 2
"""


class _NoMetrics(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server that is not SGLang: no /server_info, no /metrics."""

    def do_GET(self) -> None:
        if self.path == "/health":
            body = b"{}"
        elif self.path == "/v1/models":
            body = json.dumps({"data": [{"id": "m"}]}).encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_non_sglang_server_without_metrics_gets_one_label_and_no_sglang_advice(tmp_path):
    with loopback_http(_NoMetrics) as http_server:
        url = f"http://127.0.0.1:{http_server.server_port}"
        profile = parse_profile(PROFILE.format(url=url), tmp_path / "p.toml")
        s = Session(profile, SessionOptions(baselines_dir=tmp_path / "baselines", log_dir=tmp_path / "logs"))
        try:
            s.server()
            summary = s.summary()
        finally:
            s.stack.close()
    assert summary.server is not None and summary.server.version == ""
    (line,) = [line for line in _header(summary) if line.startswith("server metrics")]
    assert line == (
        f"server metrics: GET {url}/metrics answered HTTP 404 (no Prometheus metrics at /metrics: set [telemetry] "
        'server_metrics_path to the path this server serves them on, or "" not to read them)'
    )
    assert "SGLang" not in line and "--enable-metrics" not in line
