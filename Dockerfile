# One image for every platform process; docker-compose.yml picks the command (target `platform`).
# A second target, `connect`, adds Java and Kafka Connect's jars for RELAY=debezium.

# Kafka Connect and Debezium's PostgreSQL connector, from outbox_relay/debezium/pom.xml as natively.
FROM maven:3.9-eclipse-temurin-17 AS connect-jars
COPY outbox_relay/debezium/pom.xml /build/pom.xml
RUN mvn -B -q -f /build/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=/jars

FROM python:3.11-slim AS platform
# Bytecode is compiled at build time: the processes run as nobody, who cannot write it beside the
# sources, and would otherwise compile every module again at every start.
ENV PYTHONUNBUFFERED=1 UV_PROJECT_ENVIRONMENT=/opt/venv UV_PYTHON_DOWNLOADS=never UV_COMPILE_BYTECODE=1 \
    PATH=/opt/venv/bin:$PATH
RUN pip install --no-cache-dir uv==0.13.9
WORKDIR /app
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-install-project --no-dev
# The runtime is installed as the library it is (a built wheel, not the source tree); the demo's
# services beside it import it like any other user.
COPY effectively_once ./effectively_once
COPY docs/adopting-the-runtime.md ./docs/adopting-the-runtime.md
RUN uv sync --frozen --no-dev --no-editable && rm -rf effectively_once
COPY services ./services
COPY outbox_relay ./outbox_relay
COPY chaos_panel ./chaos_panel
COPY auditor ./auditor
COPY infra ./infra
COPY dashboards ./dashboards
COPY labs ./labs
RUN python -m compileall -q services outbox_relay chaos_panel auditor infra dashboards labs
ENV PYTHONPATH=/app
USER nobody

# RELAY=debezium's worker (infra/compose/relay-debezium.yml): `python -m outbox_relay
# connect-worker` renders its configuration from the templates the native path uses, then runs it.
FROM platform AS connect
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* && mkdir -p /connect-offsets && chown nobody /connect-offsets
COPY --from=connect-jars /jars /opt/connect-jars
USER nobody

FROM platform
