"""Logs through the OpenTelemetry Python SDK (LoggerProvider, the logging handler,
OTLPLogExporter over HTTP/protobuf) to a Sluice server's /v1/logs, for crates/cli/tests/otlp_logs.rs.

usage: send_logs.py ENDPOINT SERVICE ENVIRONMENT none|gzip

Prints one JSON line: the trace and span ids of the span the first records were logged in, and
the exporter's results. Exits 1 when an export did not succeed. With `none`, it also posts a
request built with the opentelemetry-proto classes (one record nested three levels deep) and a
bad body, and reads the answers with the same generated classes (`ExportLogsServiceResponse`,
`google.rpc.Status`): "raw" in the JSON line.
"""

import json
import logging
import sys
import time

import requests
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

endpoint, service, environment, compression = sys.argv[1:5]
results = []


class RecordingExporter(OTLPLogExporter):
    """The SDK's exporter, keeping each export's result (the SDK only logs failures)."""

    def export(self, batch):
        result = super().export(batch)
        results.append(result.name)
        return result


resource = Resource.create({"service.name": service, "deployment.environment": environment, "host.name": "box1"})
provider = LoggerProvider(resource=resource)
exporter = RecordingExporter(
    endpoint=endpoint,
    timeout=10,
    compression=Compression.Gzip if compression == "gzip" else Compression.NoCompression,
)
# One export per record: each record is one request the test can count.
provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
handler = LoggingHandler(level=logging.DEBUG, logger_provider=provider)
log = logging.getLogger("shop.checkout")
log.propagate = False
log.setLevel(logging.DEBUG)
log.addHandler(handler)

tracer = TracerProvider(resource=resource).get_tracer("shop")
with tracer.start_as_current_span("checkout") as span:
    ctx = span.get_span_context()
    log.warning("payment slow for %s", "order-7", extra={"order_id": 7, "amount": 12.5, "tags": ["a", "b"]})
    log.error({"event": "refund", "items": [1, 2], "ok": False})
log.info("no span here")
provider.force_flush()
provider.shutdown()


def raw_answers():
    """A request with one good record and one whose attribute nests three maps deep, and a bad
    body: the answers decoded with the generated classes."""
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="raw-proto")))
    sl = rl.scope_logs.add()
    now = time.time_ns()
    sl.log_records.add(time_unix_nano=now, severity_text="Info", body=AnyValue(string_value="flat"))
    deep = AnyValue(int_value=1)
    for key in ("c", "b", "a"):
        deep = AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=key, value=deep)]))
    sl.log_records.add(time_unix_nano=now, body=AnyValue(string_value="deep"),
                       attributes=[KeyValue(key="nested", value=deep)])
    headers = {"Content-Type": "application/x-protobuf"}
    ok = requests.post(endpoint, data=req.SerializeToString(), headers=headers, timeout=10)
    answer = ExportLogsServiceResponse.FromString(ok.content)
    bad = requests.post(endpoint, data=b"\x0a\xff\xff", headers=headers, timeout=10)
    status = Status.FromString(bad.content)
    return {
        "status": ok.status_code,
        "content_type": ok.headers.get("Content-Type"),
        "rejected": answer.partial_success.rejected_log_records,
        "message": answer.partial_success.error_message,
        "bad_status": bad.status_code,
        "bad_code": status.code,
        "bad_message": status.message,
    }


out = {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x"), "results": results}
if compression == "none":
    out["raw"] = raw_answers()
print(json.dumps(out))
sys.exit(0 if results and all(r == "SUCCESS" for r in results) else 1)
