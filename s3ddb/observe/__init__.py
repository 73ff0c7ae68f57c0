"""What s3ddb tells about its own work: the metrics each commit records in its
version (:mod:`.commit_metrics`), and OpenTelemetry spans and instruments when
``opentelemetry-api`` is installed (:mod:`.telemetry`)."""

__all__: list[str] = []
