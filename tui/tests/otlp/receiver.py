"""An OTLP/HTTP metrics receiver for tboxscope's tests, written with nothing of tboxscope's:
each POST /v1/metrics (application/x-protobuf) is decoded with OpenTelemetry's official
Python protobuf definitions (PyPI opentelemetry-proto) and printed as one JSON line
(protobuf's JSON mapping) on standard output. The port it listens on (127.0.0.1, chosen by the
system) is the first line. With an argument N, the first N requests are answered
503 Service Unavailable (a line {"refused": 503} each), to see the sender retry."""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

REFUSE = [int(sys.argv[1]) if len(sys.argv) > 1 else 0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, code, body=b"", ctype="text/plain"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/metrics":
            return self.answer(404)
        if self.headers.get("Content-Type") != "application/x-protobuf":
            return self.answer(415)
        if REFUSE[0] > 0:
            REFUSE[0] -= 1
            print(json.dumps({"refused": 503}), flush=True)
            return self.answer(503)
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        print(json.dumps(MessageToDict(request)), flush=True)
        reply = ExportMetricsServiceResponse().SerializeToString()
        self.answer(200, reply, "application/x-protobuf")

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
