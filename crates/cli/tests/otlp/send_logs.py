"""Logs through the OpenTelemetry Python SDK (LoggerProvider, the logging handler,
OTLPLogExporter over HTTP/protobuf) to a Sluice server's /v1/logs, for crates/cli/tests/otlp_logs.rs.

usage: send_logs.py ENDPOINT SERVICE ENVIRONMENT none|gzip

Prints one JSON line: the trace and span ids of the span the first records were logged in, and
the exporter's results. Exits 1 when an export did not succeed.
"""

import json
import logging
import sys

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
print(json.dumps({"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x"), "results": results}))
sys.exit(0 if results and all(r == "SUCCESS" for r in results) else 1)
