# One image for every platform process; docker-compose.yml picks the command.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 UV_PROJECT_ENVIRONMENT=/opt/venv UV_PYTHON_DOWNLOADS=never \
    PATH=/opt/venv/bin:$PATH
RUN pip install --no-cache-dir uv==0.13.9
WORKDIR /app
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-install-project --no-dev
COPY services ./services
COPY infra ./infra
COPY outbox_relay ./outbox_relay
COPY dashboards ./dashboards
ENV PYTHONPATH=/app
USER nobody
