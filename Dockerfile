# One image for every platform process; docker-compose.yml picks the command.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 UV_PROJECT_ENVIRONMENT=/opt/venv UV_PYTHON_DOWNLOADS=never \
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
COPY infra ./infra
COPY dashboards ./dashboards
ENV PYTHONPATH=/app
USER nobody
